"""Third-party chatter goes to a log file beside the database; the terminal shows LayerBench's own
lines (`layerbench --verbose` shows everything, as the libraries print it). Where that file cannot
be written (a server database and a read-only working folder, as in the Docker image), the file
is the cache folder's `layerbench.log`, else there is none; one line says so. A log location never
fails a command.

What reached the terminal and how it is emitted (found by running the commands):
- torchao's "Failed to load ..._C_mxfp8...so" / "_C_cutlass_90a": `logging` records of the
  `torchao` logger, which has no handler, so Python's last-resort handler printed them;
- torch's `_pytree` "Enum subclass ... register_constant() ... deprecated": `logging` records of
  `torch.utils._pytree`, printed by the stream handler torch attaches to its `torch` logger at
  import (with `propagate = False`);
- MLflow's "Creating initial MLflow database tables" INFO: the `mlflow` logger, given a stream
  handler by MLflow at import unless `MLFLOW_CONFIGURE_LOGGING=false`;
- library `warnings.warn` calls (deprecations): Python's warnings machinery.
All are Python logging or warnings, so no file descriptor is redirected: `route_logs` gives the
root logger a handler that appends to the log file, captures warnings into it, tells MLflow not
to configure logging, and `detach_stream_handlers` (called again once torch is imported) moves
the libraries' own terminal handlers aside so their records reach the root. LayerBench's own
loggers keep printing to stderr, and a trial's errors travel in its result, never through
stderr, so nothing of LayerBench's is hidden.

Trial processes inherit the file through LAYERBENCH_LOG_FILE: `harness/__init__.py` calls
`route_logs` at import in any process where it is set (the fork server imports harness before
anything else), and the trial entry point detaches the handlers its libraries installed.
"""

from __future__ import annotations

import logging
import os
import sys
from io import TextIOWrapper
from pathlib import Path

LOG_FILE_ENV = "LAYERBENCH_LOG_FILE"
VERBOSE_ENV = "LAYERBENCH_VERBOSE"
OWN_LOGGERS = ("layerbench", "harness", "leaderboard")
FORMAT = "%(asctime)s %(process)d %(name)s %(levelname)s: %(message)s"


class LogFile(logging.FileHandler):
    """Appends to the log file, created (with its folder) on the first record only; never fails
    a command: a record it cannot write is dropped. (`FileHandler.emit` opens a delayed file
    outside the `try` that hands errors to `handleError`, so `emit` catches that itself.)"""

    def __init__(self, path: Path) -> None:
        super().__init__(path, mode="a", encoding="utf-8", delay=True)
        self.addFilter(lambda record: record.name.split(".")[0] not in OWN_LOGGERS)
        self.setFormatter(logging.Formatter(FORMAT))

    def _open(self) -> TextIOWrapper:
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        return super()._open()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            super().emit(record)
        except OSError:
            self.handleError(record)

    def handleError(self, record: logging.LogRecord) -> None:
        pass


class Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to the current `sys.stderr` (which a test runner may swap)."""

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


def log_file_beside(database_url: str) -> Path:
    """`X.log` beside a SQLite database file `X.db`; `layerbench.log` here for a server."""
    prefix = "sqlite:///"
    if database_url.startswith(prefix) and database_url[len(prefix) :] not in ("", ":memory:"):
        return Path(database_url[len(prefix) :]).with_suffix(".log").resolve()
    return Path("layerbench.log").resolve()


_sizes: dict[Path, int] = {}
"""The size of each log file when this process chose it."""


def verbose() -> bool:
    return os.environ.get(VERBOSE_ENV) == "1"


def can_write(path: Path) -> bool:
    """Whether this process may append to `path`, creating it and its folders if need be (tried
    without creating anything: the file is made on its first record)."""
    if path.exists():
        return os.access(path, os.W_OK)
    folder = path.parent
    while not folder.exists():
        folder = folder.parent
    return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)


_noted: set[str] = set()
"""The fallback notes this process has printed."""


def writable_log_file(path: Path, fallback: Path | None) -> Path:
    """`path` if this process may write it, else `fallback` if it may write that, else the null
    device (no file); a fallback is said once, in one line on LayerBench's logger."""
    if can_write(path):
        return path
    chosen = fallback if fallback is not None and can_write(fallback) else Path(os.devnull)
    where = "go to " + str(chosen) if chosen != Path(os.devnull) else "are not kept"
    note = f"note: cannot write the log file {path}, so third-party messages {where}"
    if note not in _noted:
        _noted.add(note)
        logging.getLogger("layerbench").warning(note + " (--verbose shows them)")
    return chosen


def route_logs(path: Path, fallback: Path | None = None) -> None:
    """Send third-party log records and warnings to `path`, else to `fallback` where `path` cannot
    be written, else nowhere (see the module docstring; a log location never fails a command);
    LayerBench's own loggers keep a stderr handler. Idempotent: a second call moves the file."""
    if verbose():
        return
    route_own_loggers()
    path = writable_log_file(path, fallback)
    os.environ[LOG_FILE_ENV] = str(path)
    _sizes.setdefault(path, size_of(path))
    os.environ["MLFLOW_CONFIGURE_LOGGING"] = "false"
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, LogFile)]:
        root.removeHandler(handler)
        handler.close()
    root.addHandler(LogFile(path))
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    detach_stream_handlers()


def route_own_loggers() -> None:
    """LayerBench's own loggers print their warnings to stderr (once each)."""
    for name in OWN_LOGGERS:
        own = logging.getLogger(name)
        if not own.handlers:
            own.addHandler(Stderr())
            own.setLevel(logging.WARNING)


def terminal(handler: logging.Handler) -> bool:
    streams = (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)
    return (
        isinstance(handler, logging.StreamHandler)
        and not isinstance(handler, logging.FileHandler)
        and getattr(handler, "stream", None) in streams
    )


def detach_stream_handlers() -> None:
    """Move the terminal handlers that libraries attached to their own loggers (torch, MLflow,
    transformers) aside, so their records reach the log file; LayerBench's loggers keep theirs."""
    if verbose() or LOG_FILE_ENV not in os.environ:
        return
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if not isinstance(logger, logging.Logger) or name.split(".")[0] in OWN_LOGGERS:
            continue
        for handler in [h for h in logger.handlers if terminal(h)]:
            logger.removeHandler(handler)
        logger.propagate = True


NOTEWORTHY = (" WARNING: ", " ERROR: ", " CRITICAL: ")
"""The levels whose records make a command print where the log file is (INFO records, such as
a database migration's, are written silently)."""


def written() -> Path | None:
    """The log file, if this process or its trials wrote a warning or an error to it since it
    was chosen."""
    chosen = os.environ.get(LOG_FILE_ENV)
    if chosen is None or verbose():
        return None
    path = Path(chosen)
    start = _sizes.get(path, 0)
    if size_of(path) <= start:
        return None
    with path.open("rb") as log:
        log.seek(start)
        added = log.read().decode("utf-8", errors="replace")
    return path if any(level in added for level in NOTEWORTHY) else None


def size_of(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0
