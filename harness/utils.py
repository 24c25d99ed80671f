"""Small helpers shared across layers (no imports of their own beyond the standard library)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
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
