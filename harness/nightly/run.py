"""`layerbench nightly`: re-execute every trial of the suites of a cadence, then detect changes.

Each suite becomes one nightly suite run (kind "nightly": git commit, package versions, host,
CPU/GPU, start/end). Its trials are the suite's planned trials under keys derived from the run's
id (`harness.store.nightly.nightly_key`), so nothing is served from the content-addressed store,
and a nightly run interrupted by SIGTERM resumes with the same claims semantics as `run`.
"""

from __future__ import annotations

import os
import platform
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from functools import cache
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from harness import service
from harness.claims import Finding
from harness.core import CellKey, RunStatus, cell_of
from harness.env import cpu_model, git_commit, package_versions
from harness.nightly.detect import (
    STREAK_KINDS,
    Change,
    Key,
    PastAlert,
    RunValues,
    detect,
    verdict_changes,
)
from harness.ranking.suite import claim_findings, plan_of
from harness.records import FAILED_STATUSES, PlannedTrial
from harness.registry import METRICS
from harness.runner.backend import Executor
from harness.service.run import Display, ProgressDisplay, Tracker
from harness.spec import Suite
from harness.spec.declaration import RankingDeclaration
from harness.spec.rank import tuning_seeds
from harness.stats.outcomes import metric_value, select_tuned
from harness.store.db import finite
from harness.store.models import Alert, SuiteRun
from harness.store.nightly import (
    add_alerts,
    end_nightly_run,
    finished_nightly_runs,
    nightly_key,
    nightly_run_on,
    run_outcomes,
    run_status_counts,
    start_nightly_run,
    stored_alerts,
)

HISTORY_RUNS_PER_WINDOW = 4  # how many windows of earlier runs detection reads


@dataclass
class SuiteOutcome:
    """What one suite's nightly run did: its run, trial statuses and alerts, or why it was
    skipped."""

    path: Path
    suite: Suite
    run: SuiteRun | None = None
    statuses: dict[str, int] = field(default_factory=dict)
    alerts: list[Alert] = field(default_factory=list)
    skipped: str | None = None
    interrupted: bool = False


@cache
def machine() -> dict[str, Any]:
    """The software and hardware a nightly run ran on (recorded with the run)."""
    import torch

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {
        "packages": package_versions(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": gpus,
    }


def host_class(environment: dict[str, Any]) -> str:
    """Machines whose results compare: the same GPUs, else the same CPU model and core count."""
    gpus = environment["gpus"]
    if gpus:
        return f"{len(gpus)}x {gpus[0]}"
    return f"cpu {environment['cpu']} x{environment['cpu_count']}"


def today() -> date:
    return datetime.now(UTC).date()


@dataclass
class NightlyRecord:
    """How a nightly run is recorded (`harness.service.RunRecord`): one nightly suite run (or
    today's interrupted one, resumed), its trials under keys derived from its id."""

    host: str
    stop: threading.Event
    skip_existing: bool = False
    run: SuiteRun | None = None
    skipped: str | None = None

    def trials(
        self, store: Engine, suite: Suite, planned: list[PlannedTrial]
    ) -> list[PlannedTrial]:
        if self.skip_existing:
            self.run = nightly_run_on(store, suite.suite, git_commit(), today(), self.host)
            if self.run is not None and self.run.status == RunStatus.DONE:
                self.skipped = f"already run today at this commit (suite run #{self.run.id})"
                return []
        if self.run is None:
            declared = RankingDeclaration.of_suite(suite)
            self.run = start_nightly_run(
                store, suite.suite, suite.cadence, len(planned), declared, self.host, machine()
            )
        return [replace(trial, key=nightly_key(trial.key, self.run.id)) for trial in planned]

    @contextmanager
    def open(
        self, store: Engine, suite: Suite, planned: list[PlannedTrial], todo: int
    ) -> Iterator[SuiteRun | None]:
        if self.skipped is not None or self.run is None:
            yield None
            return
        yield self.run
        status = RunStatus.INTERRUPTED if self.stop.is_set() else RunStatus.DONE
        self.run = end_nightly_run(store, self.run.id, status)


def run_nightly_suite(
    engine: Engine,
    outcome: SuiteOutcome,
    executor: Executor,
    stop: threading.Event,
    host: str,
    skip_existing: bool = False,
    tracker: Callable[[], Tracker] | None = None,
    progress: ProgressDisplay | None = None,
) -> SuiteOutcome:
    """Run one suite's nightly run (or resume today's interrupted one) through the one run path
    (`harness.service.run_suite`), then detect changes."""
    suite = outcome.suite
    record = NightlyRecord(host, stop, skip_existing)
    display = Display(progress=progress) if progress is not None else Display()
    service.run_suite(
        suite,
        executor=executor,
        store=engine,
        tracker=tracker,
        record=record,
        display=display,
        stop=stop,
    )
    run = record.run
    assert run is not None  # a skipped run is the one found; else one was started
    outcome.run, outcome.statuses = run, run_status_counts(engine, run.id)
    outcome.skipped = record.skipped
    outcome.interrupted = record.skipped is None and stop.is_set()
    if record.skipped is None and not outcome.interrupted:
        outcome.alerts = add_alerts(engine, detect_run(engine, suite, run))
    return outcome


def watched_metrics(suite: Suite) -> list[str]:
    return suite.regression.metrics or [suite.rank.metric]


def run_values(
    engine: Engine, run: SuiteRun, metrics: Sequence[str], tuned_on: int | None = None
) -> RunValues:
    """Each seed's tuned value of every watched metric, and each seed's status, in one run
    (`tuned_on`: sweep points chosen on these first seeds, a sequential suite's initial ones,
    as `rank` chooses them)."""
    outcomes = run_outcomes(engine, run.id)
    values: dict[Key, dict[int, float]] = {}
    statuses: dict[CellKey, dict[int, str]] = {}
    for index, metric in enumerate(metrics):
        direction = METRICS.get(metric).direction
        for o in select_tuned(outcomes, metric, direction, "per_method", tuned_on):
            value = metric_value(o, metric)
            if value is not None:
                values.setdefault((o.method, o.model, o.task, metric), {})[o.seed] = value
            if index == 0:
                statuses.setdefault(cell_of(o), {})[o.seed] = o.status
    packages = (run.environment or {}).get("packages", {})
    return RunValues(
        run_id=run.id,
        git_commit=run.git_commit,
        packages=packages,
        values=values,
        statuses=statuses,
    )


def past_alerts(alerts: Sequence[Alert]) -> dict[tuple[int, Key], PastAlert]:
    return {
        (a.suite_run_id, (a.method, a.model, a.task, a.metric)): PastAlert(
            a.kind, a.direction, int(a.detail.get("since_run", a.suite_run_id))
        )
        for a in alerts
        if a.kind in STREAK_KINDS
    }


def claim_verdicts(engine: Engine, suite: Suite, run: SuiteRun) -> list[Finding]:
    """The verdicts of the suite's `expect` claims on one nightly run's trials."""
    outcomes = run_outcomes(engine, run.id)
    return claim_findings(plan_of(suite, []), outcomes)


def detect_run(engine: Engine, suite: Suite, run: SuiteRun) -> list[Alert]:
    """The alerts of a finished nightly run against the suite's earlier nightly runs."""
    metrics = watched_metrics(suite)
    limit = HISTORY_RUNS_PER_WINDOW * suite.regression.window
    earlier = finished_nightly_runs(engine, suite.suite, run.host_class, before=run.id)[-limit:]
    tuned_on = tuning_seeds(suite.schedule)
    history = [run_values(engine, r, metrics, tuned_on) for r in earlier]
    alerts = past_alerts(stored_alerts(engine, suite.suite, [r.id for r in earlier]))
    directions = {metric: METRICS.get(metric).direction for metric in metrics}
    current = run_values(engine, run, metrics, tuned_on)
    changes = detect(current, history, alerts, suite.regression, suite.rank.alpha, directions)
    if suite.expect and earlier:
        now, before = (claim_verdicts(engine, suite, r) for r in (run, earlier[-1]))
        changes += verdict_changes(now, before, current, history[-1])
    return [alert_row(change, run) for change in changes]


def alert_row(change: Change, run: SuiteRun) -> Alert:
    method, model, task, metric = change.key
    detail = dict(change.detail)
    z = change.z
    if z is not None and finite(z) is None:
        detail["z"] = "inf" if z > 0 else "-inf"  # outside any band: the window has no spread
    return Alert(
        suite_run_id=run.id,
        suite=run.suite,
        method=method,
        model=model,
        task=task,
        metric=metric,
        kind=change.kind,
        direction=change.direction,
        old_mean=change.old_mean,
        old_ci_low=change.old_ci[0],
        old_ci_high=change.old_ci[1],
        new_mean=change.new_mean,
        new_ci_low=change.new_ci[0],
        new_ci_high=change.new_ci[1],
        delta=change.delta,
        percent=change.percent,
        p_value=change.p_value,
        z=None if z is None else finite(z),
        tolerance=change.tolerance,
        commit_before=change.commit_before,
        commit_after=change.commit_after,
        detail=detail,
        acknowledged=False,
        created_at=datetime.now(UTC),
    )


def exit_code(outcomes: Sequence[SuiteOutcome]) -> int:
    """3 if a regression is confirmed or a status changed, else 1 if a trial failed, else 0."""
    fresh = [o for o in outcomes if o.skipped is None]
    if any(a.kind in ("regression", "status") for o in fresh for a in o.alerts):
        return 3
    if any(o.statuses.get(status) for o in fresh for status in FAILED_STATUSES):
        return 1
    return 0
