"""Preparing a dataset: split the documents, build the tokenizer, tokenize in worker processes,
write the shards and the index (see `harness.data.store`)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.data.sources import Document, iter_chunks, split_hint
from harness.data.store import (
    SEPARATOR,
    SPLITS,
    DatasetIndex,
    SplitInfo,
    SplitRule,
    content_fingerprint,
    split_documents,
    staging_folder,
    token_dtype,
    write_index,
    write_split,
)
from harness.data.tokenizers import Tokenizer, bpe_vocab_size, build_tokenizer

CHUNK_CHARS = 1 << 20
"""Characters of text sent to a worker at a time."""
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")

Progress = Callable[[int, int], None]
"""Called with the UTF-8 bytes and the tokens of each tokenized run of documents."""


@dataclass(frozen=True)
class PrepareRequest:
    """What `layerbench data prepare` asks for."""

    name: str
    source: str
    tokenizer: str
    val_fraction: float = 0.1
    test_fraction: float = 0.1
    seed: int = 0
    workers: int = 1


def check_name(name: str) -> None:
    if not NAME.match(name):
        raise ValueError(
            f"dataset name '{name}': use letters, digits, '.', '_' and '-' (starting with a "
            "letter or digit)"
        )


def check_fractions(val_fraction: float, test_fraction: float) -> None:
    for label, fraction in (("--val-fraction", val_fraction), ("--test-fraction", test_fraction)):
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"{label} {fraction}: give a fraction between 0 and 1 (exclusive)")
    if val_fraction + test_fraction >= 1.0:
        raise ValueError("--val-fraction + --test-fraction must be below 1")


def check_request(request: PrepareRequest) -> None:
    """Raise ValueError for a bad name, fractions or tokenizer name (before any corpus is read)."""
    check_name(request.name)
    check_fractions(request.val_fraction, request.test_fraction)
    bpe_vocab_size(request.tokenizer)


def prepare(
    request: PrepareRequest, documents: list[Document], progress: Progress | None = None
) -> DatasetIndex:
    """Tokenize `documents` into the prepared dataset `request.name` (replacing one of that
    name only when complete)."""
    check_request(request)
    documents = [(name, text) for name, text in documents if text]
    if not documents or not any(text.strip() for _, text in documents):
        raise ValueError(f"source '{request.source}': the corpus is empty (no text)")
    fractions = (request.val_fraction, request.test_fraction)
    splits = split_documents(documents, *fractions, request.seed, split_hint(request.source))
    tokenizer = build_tokenizer(
        request.tokenizer,
        [text for _, text in splits["train"]],
        itertools.chain((text for _, text in documents), [SEPARATOR]),
    )
    dtype = token_dtype(tokenizer.vocab_size)
    separator = tokenizer.encode(SEPARATOR)
    with staging_folder(request.name) as folder:
        tokenizer.save(folder)
        np.save(folder / "byte_lengths.npy", tokenizer.byte_lengths)
        with encoder(tokenizer, request.workers, progress) as encode:
            infos = {
                split: write_split(folder, split, splits[split], encode, separator, dtype)
                for split in SPLITS
            }
        return write_index(folder, index_fields(request, documents, tokenizer, infos, dtype))


def index_fields(
    request: PrepareRequest,
    documents: list[Document],
    tokenizer: Tokenizer,
    infos: dict[str, SplitInfo],
    dtype: np.dtype[Any],
) -> dict[str, Any]:
    rule = SplitRule(
        seed=request.seed,
        val_fraction=request.val_fraction,
        test_fraction=request.test_fraction,
    )
    return {
        "name": request.name,
        "source": request.source,
        "content_fingerprint": content_fingerprint(documents),
        "tokenizer": tokenizer.identity(),
        "tokenizer_fingerprint": tokenizer.fingerprint(),
        "vocab_size": tokenizer.vocab_size,
        "dtype": dtype.name,
        "split": rule.model_dump(),
        "splits": {split: info.model_dump() for split, info in infos.items()},
    }


_worker_tokenizer: Tokenizer | None = None


def _start_worker(tokenizer: Tokenizer) -> None:
    global _worker_tokenizer
    _worker_tokenizer = tokenizer


def _encode_in_worker(texts: list[str]) -> list[np.ndarray]:
    assert _worker_tokenizer is not None
    return [_worker_tokenizer.encode(text) for text in texts]


@contextmanager
def encoder(
    tokenizer: Tokenizer, workers: int, progress: Progress | None
) -> Iterator[Callable[[list[Document]], Iterator[list[np.ndarray]]]]:
    """An `Encoder` over `workers` processes (in this process for one), reporting `progress`."""
    pool = (
        ProcessPoolExecutor(workers, initializer=_start_worker, initargs=(tokenizer,))
        if workers > 1
        else None
    )

    def encode(documents: list[Document]) -> Iterator[list[np.ndarray]]:
        chunks = [[text for _, text in chunk] for chunk in iter_chunks(documents, CHUNK_CHARS)]
        if pool is not None:
            results: Iterator[list[np.ndarray]] = pool.map(_encode_in_worker, chunks)
        else:
            results = ([tokenizer.encode(text) for text in chunk] for chunk in chunks)
        for texts, arrays in zip(chunks, results, strict=True):
            if progress is not None:
                progress(sum(len(text.encode("utf-8")) for text in texts), sum(map(len, arrays)))
            yield arrays

    try:
        yield encode
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
