"""Small helpers shared across layers (at import, nothing beyond the standard library: torch is
imported by the one helper that sets its threads, when called)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """{"optimizer": {"lr": 0.1}} -> {"optimizer.lr": "0.1"}."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = str(value)
    return flat


def chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """`items` in consecutive lists of at most `size` (e.g. to bound SQL `IN` lists)."""
    items = list(items)
    for start in range(0, len(items), size):
        yield items[start : start + size]


@contextmanager
def intra_op_threads(threads: int) -> Iterator[None]:
    """torch's intra-op threads set to `threads` for the block (then restored)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
