"""Small helpers shared across layers (at import, nothing beyond the standard library: torch is
imported by the one helper that sets its threads, when called)."""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import threading
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


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector paused for the block (reference counting still frees every
    acyclic object): for code that builds hundreds of thousands of long-lived objects, such as
    reading and ranking 100,000 trials, whose collector passes over the growing heap cost a
    third of the time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def begin_startup() -> None:
    """Pause the cyclic garbage collector for a process's start-up: importing torch, MLflow or
    SciPy creates millions of objects that live as long as the process, and the collections
    they trigger took a fifth of the import time (docs/performance.md). `end_startup` resumes
    it; CPython's gc docs give the recipe (disable early, `gc.freeze` before the work)."""
    gc.disable()


def end_startup() -> None:
    """The start-up is over: move every object it left to the collector's permanent generation
    (`gc.freeze`: never scanned again, and a forked child's collector never writes to those
    shared pages) and resume the collector. Does nothing when the collector is running."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


@contextmanager
def startup() -> Iterator[None]:
    """`begin_startup` for the block, then `end_startup`: a cold process's imports."""
    begin_startup()
    try:
        yield
    finally:
        end_startup()


def exit_now(status: int = 0) -> None:
    """Flush what is buffered (the logging handlers and the standard streams) and end the
    process with `status` without freeing the interpreter's objects, which took 0.2-0.9 s in a
    process that imported torch or MLflow (mypy ends the same way, `hard_exit` in
    mypy/util.py). Registered at exit before anything else a process imports, it runs after
    every handler those libraries register (last in, first out)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os._exit(status)


@contextmanager
def kept_signal_handlers(*signums: int) -> Iterator[None]:
    """The handlers of `signums` as they were once the block ends: a library that installs its
    own (Ray's driver takes SIGTERM and keeps it after `ray.shutdown`) does not leave it to the
    rest of the process, whose forked children would inherit it and ignore a terminate."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread can set handlers, so nothing can have replaced them
        return
    saved = {signum: signal.getsignal(signum) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            if handler is not None:
                signal.signal(signum, handler)
