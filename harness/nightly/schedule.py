"""`layerbench schedule`: run a job at the times of a cron expression (UTC), in a plain loop.

SIGTERM or SIGINT sets a stop event: the loop stops waiting, a running nightly run kills its
trials and releases their claims (`run_local(stop=...)`), and the process exits.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from croniter import croniter

Clock = Callable[[], datetime]
Wait = Callable[[float], object]
MAX_WAIT_S = 60.0  # the clock is read again at least this often (suspend, clock changes)


class CronError(ValueError):
    """A cron expression croniter cannot parse."""


def utc_now() -> datetime:
    return datetime.now(UTC)


def check_cron(expression: str) -> str:
    if not croniter.is_valid(expression):
        raise CronError(
            f"--cron '{expression}' is not a cron expression (five fields: minute hour "
            "day-of-month month day-of-week, e.g. '0 2 * * *')"
        )
    return expression


def next_time(expression: str, moment: datetime) -> datetime:
    """The first time strictly after `moment` that the expression names."""
    following: datetime = croniter(expression, moment).get_next(datetime)
    return following


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event that SIGTERM and SIGINT set while the block runs (in the main thread)."""
    stop = threading.Event()
    signals = (signal.SIGTERM, signal.SIGINT)
    previous = {signum: signal.signal(signum, lambda *_: stop.set()) for signum in signals}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_schedule(
    expression: str,
    job: Callable[[], object],
    stop: threading.Event,
    clock: Clock = utc_now,
    wait: Wait | None = None,
    run_now: bool = False,
) -> None:
    """Call `job` at each time of `expression` until `stop` is set.

    `clock` and `wait` (by default the real UTC clock and `stop.wait`) are the time source; a test
    passes a fake pair."""
    wait = wait or stop.wait
    if run_now and not stop.is_set():
        job()
    while not stop.is_set():
        due = next_time(expression, clock())
        while not stop.is_set() and (left := (due - clock()).total_seconds()) > 0:
            wait(min(left, MAX_WAIT_S))
        if not stop.is_set():
            job()
