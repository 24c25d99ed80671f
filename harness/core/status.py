"""Trial and suite-run statuses, each with its rules.

The values are the strings stored in the database (`trials.status`, `suite_runs.status`); a
`StrEnum` member equals its string, so rows read back compare equal before they are converted.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """A trial's status: planned and claimed (`pending`, `running`), then one final status."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    DIVERGED = "diverged"
    FAILED = "failed"
    TIMEOUT = "timeout"

    @property
    def final(self) -> bool:
        """The trial has a stored result and is never recomputed unless asked."""
        return self not in (Status.PENDING, Status.RUNNING)

    @property
    def active(self) -> bool:
        """Claimed or not yet run: a runner may (re)start it."""
        return not self.final

    @property
    def retried(self) -> bool:
        """No valid result: `--retry-failed` reruns it and `layerbench run` exits with code 1."""
        return self in (Status.FAILED, Status.TIMEOUT)

    @property
    def loses(self) -> bool:
        """A seed of this status, having no value, loses a comparison to any finite value (a done
        trial without the ranked metric loses too: see `harness.ranking.outcomes`). A crash or a
        timeout is an infrastructure failure, never a loss: `--retry-failed` reruns it, and until
        then a comparison uses the seeds both methods finished and counts the excluded ones."""
        return self is Status.DIVERGED

    @property
    def mlflow(self) -> str:
        """The MLflow run status a finished trial is logged with."""
        return _MLFLOW[self]

    @property
    def style(self) -> str:
        """The console colour of a finished trial's line."""
        return _STYLE[self]


_MLFLOW = {
    Status.PENDING: "SCHEDULED",
    Status.RUNNING: "RUNNING",
    Status.DONE: "FINISHED",
    Status.DIVERGED: "FINISHED",
    Status.TIMEOUT: "KILLED",
    Status.FAILED: "FAILED",
}
_STYLE = {
    Status.PENDING: "white",
    Status.RUNNING: "white",
    Status.DONE: "green",
    Status.DIVERGED: "yellow",
    Status.FAILED: "red",
    Status.TIMEOUT: "red",
}
FAILURE_ORDER = (Status.DIVERGED, Status.TIMEOUT, Status.FAILED)
"""Which status names a method's failure when its seeds failed in several ways."""


class RunStatus(StrEnum):
    """A suite run's status (`layerbench run` and `layerbench nightly`)."""

    RUNNING = "running"
    DONE = "done"
    INTERRUPTED = "interrupted"
