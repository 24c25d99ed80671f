"""Prepared datasets on disk: token shards and their index (nanoGPT's `.bin` files, indexed).

A prepared dataset is a folder `data_dir()/NAME/` holding
- `{split}.bin`: the split's tokens, a flat uint16 (vocabulary up to 65,536) or uint32 array:
  the split's documents in split order, joined by the tokens of "\\n" (as the built-in `lm`
  loader joins them), read through `np.memmap`;
- `{split}.docs.npy`: the token offset where each of the split's documents starts;
- `byte_lengths.npy`: the UTF-8 bytes each token id stands for (bits per byte without the
  tokenizer);
- the tokenizer's files (`tokenizer.json` or `chars.json`), so the dataset decodes on its own;
- `index.json` (`DatasetIndex`): the tokenizer's identity and fingerprint, the vocabulary size,
  the split (seed, fractions, documents per split), tokens and UTF-8 bytes per split, the
  source's content fingerprint, every file's size and sha256, and the dataset's fingerprint.

A prepare writes into a temporary folder beside the target and renames it into place when
complete; a folder without `index.json` is never read as a dataset, and an interrupted prepare's
leftovers are removed by the next prepare of that name.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from harness.cache import DataMissingError, cache_dir
from harness.data.sources import Document
from harness.data.tokenizers import Tokenizer, load_saved

FORMAT = 1
"""The on-disk layout's version, in the index and the dataset fingerprint."""
INDEX = "index.json"
SPLITS = ("train", "val", "test")
SEPARATOR = "\n"
"""The text between two documents of a split (the built-in loader's)."""
STAGING_PREFIX = ".staging-"


def data_dir() -> Path:
    """`$LAYERBENCH_DATA`, else `datasets/` in the LayerBench cache."""
    if os.environ.get("LAYERBENCH_DATA"):
        return Path(os.environ["LAYERBENCH_DATA"]).expanduser()
    return cache_dir() / "datasets"


class DatasetError(ValueError):
    """A prepared dataset that is damaged or does not suit what asks for it."""


class DatasetMissingError(DataMissingError):
    """A dataset name with no prepared dataset."""


class ShardInfo(BaseModel):
    """A file of the dataset: its size in bytes and sha256."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bytes: int
    sha256: str


class SplitInfo(BaseModel):
    """A split: its documents, tokens and the UTF-8 bytes of its text."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    documents: int
    tokens: int
    bytes: int


class SplitRule(BaseModel):
    """How documents were assigned to splits (`split_documents`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int
    val_fraction: float
    test_fraction: float


class DatasetIndex(BaseModel):
    """`index.json` of a prepared dataset (see the module doc)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: int
    name: str
    source: str
    content_fingerprint: str
    tokenizer: dict[str, Any]
    tokenizer_fingerprint: str
    vocab_size: int
    dtype: str
    split: SplitRule
    splits: dict[str, SplitInfo]
    files: dict[str, ShardInfo]
    fingerprint: str


NOT_FINGERPRINTED = ("name", "source", "fingerprint")
"""Index fields that do not decide the tokens: a dataset copied under another name, or prepared
from the same documents found elsewhere, keeps its fingerprint (so its trials' keys)."""


def dataset_fingerprint(fields: dict[str, Any]) -> str:
    """sha256 of the index's fields that decide the tokens (format, content, tokenizer, split,
    sizes, files and their checksums)."""
    kept = {k: v for k, v in fields.items() if k not in NOT_FINGERPRINTED}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def named_bytes_fingerprint(items: Iterable[tuple[str, bytes]]) -> str:
    """sha256 over each (name, bytes) in order, as `name\0length\0bytes`: a prepared dataset's
    content (its documents' UTF-8 text) and a built-in corpus's (its files' raw bytes)."""
    digest = hashlib.sha256()
    for name, raw in items:
        digest.update(f"{name}\0{len(raw)}\0".encode())
        digest.update(raw)
    return digest.hexdigest()


def content_fingerprint(documents: Sequence[Document]) -> str:
    """sha256 over every document's name and UTF-8 text, in order."""
    return named_bytes_fingerprint((name, text.encode("utf-8")) for name, text in documents)


def split_documents(
    documents: Sequence[Document],
    val_fraction: float,
    test_fraction: float,
    seed: int,
    hint: str = "give a folder of .txt files, one document each",
) -> dict[str, list[Document]]:
    """Documents assigned to train/val/test by a seeded permutation, at least one per split
    (`hint`: what gives more documents, said when there are fewer than 3).

    The permutation orders documents by sha256(f"{seed}:{name}"), so it depends only on the
    seed and the document names (not on file order, numpy's or torch's random streams).
    """
    n = len(documents)
    if n < len(SPLITS):
        raise ValueError(
            f"a document-level train/val/test split needs at least 3 documents, got {n}: {hint}"
        )
    n_val = max(1, round(n * val_fraction))
    n_test = max(1, round(n * test_fraction))
    if n - n_val - n_test < 1:
        raise ValueError(f"{n} documents leave none for training after val and test")

    def key(doc: Document) -> str:
        return hashlib.sha256(f"{seed}:{doc[0]}".encode()).hexdigest()

    order = sorted(documents, key=key)
    return {
        "val": order[:n_val],
        "test": order[n_val : n_val + n_test],
        "train": order[n_val + n_test :],
    }


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def token_dtype(vocab_size: int) -> np.dtype[Any]:
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


# --- writing ------------------------------------------------------------------------------------


def staging_prefix(name: str) -> str:
    """The start of the temporary folders of a prepare of `name`: `+` cannot occur in a dataset
    name, so `a`'s prefix matches none of `a.b`'s (names may hold '.')."""
    return f"{STAGING_PREFIX}{name}+"


@contextmanager
def staging_folder(name: str) -> Iterator[Path]:
    """A fresh folder that becomes `data_dir()/name` when the block completes, and is removed
    if it fails; leftovers of interrupted prepares of `name` are removed first."""
    root = data_dir()
    prefix = staging_prefix(name)
    try:
        root.mkdir(parents=True, exist_ok=True)
        for stale in root.glob(f"{prefix}*"):
            shutil.rmtree(stale, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    except OSError as error:
        raise DatasetError(
            f"the data folder {root} cannot be written ({error.strerror or error}); set "
            "LAYERBENCH_DATA to a folder you can write"
        ) from None
    try:
        yield staging
        target = root / name
        if target.exists():
            retired = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
            target.rename(retired / name)
        staging.rename(target)
    finally:
        for leftover in root.glob(f"{prefix}*"):
            shutil.rmtree(leftover, ignore_errors=True)


Encoder = Callable[[list[Document]], Iterator[list[np.ndarray]]]
"""Tokenizes runs of documents (in parallel workers), yielding each run's token arrays in order."""


def write_split(
    folder: Path,
    split: str,
    documents: list[Document],
    encode: Encoder,
    separator: np.ndarray,
    dtype: np.dtype[Any],
) -> SplitInfo:
    """Tokens of the split's documents joined by `separator`, appended to `{split}.bin`."""
    starts: list[int] = []
    n_tokens = 0
    with (folder / f"{split}.bin").open("wb") as shard:
        for token_arrays in encode(documents):
            for tokens in token_arrays:
                if starts:
                    shard.write(separator.astype(dtype).tobytes())
                    n_tokens += len(separator)
                starts.append(n_tokens)
                shard.write(tokens.astype(dtype).tobytes())
                n_tokens += len(tokens)
    np.save(folder / f"{split}.docs.npy", np.asarray(starts, dtype=np.int64))
    n_bytes = sum(len(text.encode("utf-8")) for _, text in documents)
    n_bytes += len(SEPARATOR.encode()) * max(len(documents) - 1, 0)
    return SplitInfo(documents=len(documents), tokens=n_tokens, bytes=n_bytes)


def write_index(folder: Path, fields: dict[str, Any]) -> DatasetIndex:
    """Record every file's size and checksum, the fingerprint, then `index.json` (last)."""
    files = {
        path.name: ShardInfo(bytes=path.stat().st_size, sha256=file_sha256(path)).model_dump()
        for path in sorted(folder.iterdir())
    }
    complete = {"format": FORMAT, **fields, "files": files}
    index = DatasetIndex(**complete, fingerprint=dataset_fingerprint(complete))
    (folder / INDEX).write_text(index.model_dump_json(indent=1) + "\n")
    return index


# --- reading ------------------------------------------------------------------------------------


def prepared_names() -> list[str]:
    """The names of the complete datasets in the data directory."""
    root = data_dir()
    return sorted(p.parent.name for p in root.glob(f"*/{INDEX}")) if root.is_dir() else []


def prepare_hint(name: str) -> str:
    return f"run `layerbench data prepare {name} --source SRC --tokenizer TOK`"


def read_index(name: str) -> DatasetIndex:
    """The index of the prepared dataset `name` (cheap: one small JSON file)."""
    path = data_dir() / name / INDEX
    if not path.is_file():
        known = ", ".join(prepared_names()) or "none"
        raise DatasetMissingError(
            f"dataset '{name}' is not prepared in {data_dir()} (prepared: {known}); "
            f"{prepare_hint(name)}"
        )
    try:
        index = DatasetIndex.model_validate_json(path.read_text())
    except ValueError as error:
        raise DatasetError(
            f"dataset '{name}': {path} is damaged ({error}); {prepare_hint(name)}"
        ) from None
    if dataset_fingerprint(index.model_dump()) != index.fingerprint:
        raise DatasetError(
            f"dataset '{name}': {path} does not match its own fingerprint (edited by hand?); "
            f"{prepare_hint(name)}"
        )
    return index


@dataclass(frozen=True)
class PreparedDataset:
    """A prepared dataset opened for reading: its index and memory-mapped splits."""

    folder: Path
    index: DatasetIndex

    @cached_property
    def tokens(self) -> dict[str, np.ndarray]:
        """Each split's tokens, memory-mapped (read-only; nothing is loaded until used)."""
        dtype = np.dtype(self.index.dtype)
        return {
            split: np.memmap(self.folder / f"{split}.bin", dtype=dtype, mode="r")
            if self.index.splits[split].tokens
            else np.zeros(0, dtype=dtype)
            for split in SPLITS
        }

    @cached_property
    def byte_lengths(self) -> np.ndarray:
        return np.asarray(np.load(self.folder / "byte_lengths.npy"), dtype=np.int64)

    def document_starts(self, split: str) -> np.ndarray:
        return np.asarray(np.load(self.folder / f"{split}.docs.npy"), dtype=np.int64)

    def tokenizer(self) -> Tokenizer:
        return load_saved(self.folder, self.index.tokenizer)

    def check_sizes(self) -> None:
        """Raise DatasetError when a file is missing or its size differs from the index."""
        for file, info in self.index.files.items():
            path = self.folder / file
            size = path.stat().st_size if path.is_file() else None
            if size != info.bytes:
                found = "missing" if size is None else f"{size:,} bytes"
                raise DatasetError(
                    f"dataset '{self.index.name}': {path} is {found}, its index says "
                    f"{info.bytes:,} bytes (a truncated or partial copy?); copy it again or "
                    f"{prepare_hint(self.index.name)}"
                )

    def verify(self) -> None:
        """`check_sizes`, then every file's sha256 against the index."""
        self.check_sizes()
        for file, info in self.index.files.items():
            if file_sha256(self.folder / file) != info.sha256:
                raise DatasetError(
                    f"dataset '{self.index.name}': {self.folder / file} does not match its "
                    f"checksum in the index (a damaged copy?); copy it again or "
                    f"{prepare_hint(self.index.name)}"
                )


def open_dataset(name: str, verify: bool = False) -> PreparedDataset:
    """The prepared dataset `name`, its files' sizes checked (and checksums with `verify`)."""
    dataset = PreparedDataset(data_dir() / name, read_index(name))
    dataset.verify() if verify else dataset.check_sizes()
    return dataset
