"""Nightly runs without training: detection rules, false alarms, reports, webhooks, alerts, cron.

Trials are "run" by a fake executor that claims each trial through the real ledger and stores a
fake result, so every other part (keys, suite runs, detection, alerts, reports) is the real one.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from sqlalchemy import Engine

from harness.core import Direction
from harness.nightly.detect import RunValues, detect, t_interval
from harness.nightly.report import build_report, markdown, notify, write_report
from harness.nightly.run import Executor, SuiteOutcome, exit_code, run_nightly_suite
from harness.nightly.schedule import CronError, check_cron, run_schedule
from harness.records import PlannedTrial, Status, TrialResult
from harness.runner.backend import Ledger, Progress
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from harness.spec.schema import RegressionSpec
from harness.store.db import open_database
from harness.store.nightly import (
    acknowledge,
    finished_nightly_runs,
    latest_results,
    stored_alerts,
)
from tests.factories import fake_result, invoke

SUITE = """\
suite: tiny
cadence: nightly
seeds: [0, 1, 2]
defaults: {train: {steps: 20, batch_size: 8, eval_every: 10, eval_batches: 2}}
models: {gpt-2l: {type: gpt, n_layers: 2, d_model: 32, n_heads: 2, max_seq_len: 64}}
tasks: {bytes: {type: lm, corpus: shakespeare, tokenizer: byte, seq_len: 32}}
methods: {a: {}, b: {norm: {placement: post}}, c: {norm: {type: rmsnorm}}}
baseline: a
"""
BASE = {"a": 2.0, "b": 2.1, "c": 1.9}
SEED_EFFECT = {0: 0.0, 1: 0.02, 2: -0.015}
Values = Callable[[PlannedTrial], tuple[Status, float]]


def fake_executor(values: Values) -> Executor:
    """Claim each trial through the ledger and store a fake result of `values(trial)`."""

    def execute(
        trials: Sequence[PlannedTrial],
        ledger: Ledger,
        progress: Progress,
        stop: threading.Event | None,
    ) -> dict[str, TrialResult]:
        rng = np.random.default_rng(0)
        results = {}
        for trial in trials:
            if ledger.claim(trial):
                status, loss = values(trial)
                results[trial.key] = fake_result(status, loss, rng)
                ledger.finish(trial, results[trial.key])
        return results

    return execute


@pytest.fixture
def engine() -> Engine:
    return open_database()


@pytest.fixture
def suite_path(tmp_path: Path) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(SUITE)
    return path


def night(engine: Engine, path: Path, values: Values) -> SuiteOutcome:
    outcome = SuiteOutcome(path, load_suite(path))
    return run_nightly_suite(engine, outcome, fake_executor(values), threading.Event(), "test-host")


def steady(shift: dict[str, float] | None = None, noise: float = 0.0, rng_seed: int = 0) -> Values:
    rng = np.random.default_rng(rng_seed)
    shift = shift or {}

    def values(trial: PlannedTrial) -> tuple[Status, float]:
        loss = BASE[trial.method] + SEED_EFFECT[trial.seed] + shift.get(trial.method, 0.0)
        return "done", loss + float(rng.normal(0.0, noise))

    return values


def nightly_history(engine: Engine, path: Path) -> list[SuiteOutcome]:
    """Four nights: b gets 0.3 worse on the third (suspected, then acknowledged) and the fourth
    confirms it (regression); the leaderboard's History tests read them."""
    nights = [night(engine, path, steady()) for _ in range(2)]
    nights += [night(engine, path, steady({"b": 0.3})) for _ in range(2)]
    acknowledge(engine, nights[2].alerts[0].id)
    return nights


def kinds(outcome: SuiteOutcome) -> list[tuple[str, str]]:
    return sorted((alert.method, alert.kind) for alert in outcome.alerts)


def test_a_step_change_is_suspected_then_confirmed_and_becomes_the_new_baseline(
    engine: Engine, suite_path: Path
) -> None:
    assert kinds(night(engine, suite_path, steady())) == []
    assert kinds(night(engine, suite_path, steady())) == []
    worse = {"b": 0.3, "c": 0.01}  # c: 0.5% worse, within the 2% tolerance
    third = night(engine, suite_path, steady(worse))
    assert kinds(third) == [("b", "suspected")] and exit_code([third]) == 0
    fourth = night(engine, suite_path, steady(worse))
    assert kinds(fourth) == [("b", "regression")] and exit_code([fourth]) == 3
    alert = fourth.alerts[0]
    assert alert.old_mean == pytest.approx(2.1 + 0.005 / 3)
    assert alert.new_mean == pytest.approx(2.4 + 0.005 / 3)
    assert alert.percent == pytest.approx(100 * 0.3 / alert.old_mean)
    assert alert.p_value == 0.0 and alert.z is None and alert.detail["z"] == "inf"
    assert alert.detail["since_run"] == third.run.id
    assert alert.detail["window_runs"] == [third.run.id - 2, third.run.id - 1]
    # The new level is the baseline now; going back is an improvement, suspected first.
    assert kinds(night(engine, suite_path, steady(worse))) == []
    assert kinds(night(engine, suite_path, steady())) == [("b", "suspected")]
    back = night(engine, suite_path, steady())
    assert kinds(back) == [("b", "improvement")] and exit_code([back]) == 0


def test_a_one_night_blip_stays_suspected_and_out_of_the_window(
    engine: Engine, suite_path: Path
) -> None:
    for _ in range(2):
        night(engine, suite_path, steady())
    blip = night(engine, suite_path, steady({"a": 0.5}))
    assert kinds(blip) == [("a", "suspected")]
    after = night(engine, suite_path, steady())
    assert kinds(after) == []
    assert after.alerts == [] and exit_code([after]) == 0


def test_a_seed_that_stops_being_done_is_a_status_alert(engine: Engine, suite_path: Path) -> None:
    night(engine, suite_path, steady())

    def diverging(trial: PlannedTrial) -> tuple[Status, float]:
        if trial.method == "a" and trial.seed == 1:
            return "diverged", float("nan")
        return steady()(trial)

    second = night(engine, suite_path, diverging)
    assert kinds(second) == [("a", "status")] and exit_code([second]) == 3
    assert second.alerts[0].detail["seeds"] == {"1": ["done", "diverged"]}
    third = night(engine, suite_path, diverging)  # still diverged: not a change
    assert kinds(third) == []


def test_a_claim_whose_verdict_changes_is_reported_once(engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "claims.yaml"
    path.write_text(SUITE + "expect: [{method: b, direction: worse, source: 'test paper'}]\n")
    first = night(engine, path, steady())  # b 0.1 worse than a on every seed: reproduced
    assert kinds(first) == []
    second = night(engine, path, steady({"b": -0.1}))  # b equals a now: inconclusive
    (alert,) = [a for a in second.alerts if a.kind == "verdict"]
    assert (alert.method, alert.model, alert.task, alert.metric) == (
        "b",
        "gpt-2l",
        "bytes",
        "val_loss",
    )
    old, new = alert.detail["verdicts"]
    assert old == "reproduced" and new.startswith("inconclusive: rules out differences outside")
    (check,) = alert.detail["checks"]
    assert check["delta"] == pytest.approx(0.0, abs=1e-9) and check["verdict"] == "inconclusive"
    assert exit_code([second]) == 0  # reported, not a regression
    third = night(engine, path, steady({"b": -0.1}))
    assert [a for a in third.alerts if a.kind == "verdict"] == []  # unchanged since the last run
    text = markdown(build_report([second], datetime(2026, 3, 4).date(), 0))
    section = text[text.index("## Claim verdicts changed") :]
    assert "b worse than a on val_loss (test paper): reproduced -> inconclusive" in section
    assert "gpt-2l / bytes: delta" in section
    assert f"rerun: `layerbench run {path} --only method=b,a,model=gpt-2l,task=bytes --force`" in (
        section
    )


def test_failed_trials_exit_1(engine: Engine, suite_path: Path) -> None:
    first = night(engine, suite_path, lambda t: ("failed", float("nan")))
    assert exit_code([first]) == 1 and first.statuses == {"failed": 9}


def test_twenty_nights_of_an_unchanged_noisy_suite_raise_no_confirmed_regression(
    engine: Engine, suite_path: Path
) -> None:
    noise = 0.06  # 3% of the loss per seed: the 2% tolerance alone would fire
    beyond_tolerance = 0
    outcomes = []
    for index in range(20):
        outcomes.append(night(engine, suite_path, steady(noise=noise, rng_seed=index)))
    runs = finished_nightly_runs(engine, "tiny")
    assert len(runs) == 20
    confirmed = [a for o in outcomes for a in o.alerts if a.kind in ("regression", "improvement")]
    assert confirmed == []
    assert all(exit_code([o]) == 0 for o in outcomes)
    # The test means something: night-to-night changes beyond the tolerance did happen.
    means = {m: [] for m in BASE}
    rng_values = [steady(noise=noise, rng_seed=i) for i in range(20)]
    trials = plan_suite(load_suite(suite_path))
    for values in rng_values:
        for method in BASE:
            means[method].append(np.mean([values(t)[1] for t in trials if t.method == method]))
    for series in means.values():
        beyond_tolerance += sum(
            abs(new - np.mean(series[max(0, i - 14) : i])) > 0.02 * np.mean(series[:i])
            for i, new in enumerate(series)
            if i >= 2
        )
    assert beyond_tolerance >= 5


def test_detection_statistics_on_plain_values() -> None:
    key = ("m", "gpt", "t", "val_loss")

    def run(run_id: int, values: list[float]) -> RunValues:
        packages = {"torch": "2.13.0"}
        return RunValues(run_id, f"c{run_id}", packages, {key: dict(enumerate(values))}, {})

    history = [run(1, [1.00, 1.02, 0.98]), run(2, [1.01, 1.03, 0.99])]
    rules = RegressionSpec(tolerance=0.05, tolerance_kind="absolute", z=4, confirm=1)
    current = RunValues(3, "c3", {"torch": "2.14.0"}, {key: {0: 1.20, 1: 1.23, 2: 1.17}}, {})
    (finding,) = detect(current, history, {}, rules, 0.05, {"val_loss": Direction.MIN})
    assert finding.kind == "regression" and finding.direction == "worse"
    assert finding.delta == pytest.approx(1.2 - 1.005)
    assert finding.z == pytest.approx((1.2 - 1.005) / np.std([1.0, 1.01], ddof=1))
    assert finding.commit_before == "c2" and finding.commit_after == "c3"
    assert finding.detail["packages_changed"] == {"torch": ["2.13.0", "2.14.0"]}
    assert finding.new_ci == pytest.approx(t_interval([1.20, 1.23, 1.17], 0.05))
    lax = RegressionSpec(tolerance=0.5, tolerance_kind="absolute", confirm=1)
    assert detect(current, history, {}, lax, 0.05, {"val_loss": Direction.MIN}) == []
    higher_is_better = detect(current, history, {}, rules, 0.05, {"val_loss": Direction.MAX})
    assert higher_is_better[0].kind == "improvement"


def test_t_interval_matches_the_textbook_formula() -> None:
    from scipy import stats

    values = [1.0, 2.0, 4.0]
    half = stats.t.ppf(0.975, 2) * np.std(values, ddof=1) / np.sqrt(3)
    assert t_interval(values, 0.05) == pytest.approx((7 / 3 - half, 7 / 3 + half))
    assert t_interval([1.0], 0.05) == (None, None)
    assert t_interval([2.0, 2.0], 0.05) == (2.0, 2.0)


class Hook(BaseHTTPRequestHandler):
    received: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Hook.received.append(json.loads(body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Hook.received = []
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()


def test_the_report_lists_regressions_first_and_reaches_the_webhook(
    engine: Engine, suite_path: Path, tmp_path: Path, webhook: str
) -> None:
    for values in (steady(), steady(), steady({"a": 0.4}), steady({"a": 0.4, "c": -0.3})):
        outcome = night(engine, suite_path, values)
    report = build_report([outcome], datetime(2026, 3, 4).date(), exit_code([outcome]))
    assert report["exit_code"] == 3
    assert [r["method"] for r in report["regressions"]] == ["a"]
    assert [r["method"] for r in report["suspected"]] == ["c"]
    regression = report["regressions"][0]
    assert regression["old"]["mean"] < regression["new"]["mean"]
    assert regression["p"] == 0.0 and regression["z"] == "inf"
    md, js = write_report(report, tmp_path / "reports")
    assert md.name == "nightly-2026-03-04.md" and json.loads(js.read_text()) == report
    text = md.read_text()
    assert text.index("## Regressions") < text.index("a / gpt-2l") < text.index("## Suspected")
    assert "2.002 [2.002, 2.002] -> 2.402 [2.358, 2.445]" in text and "p 0, z inf" in text
    assert "- tiny: suite run #4" in markdown(report)
    assert regression["command"] == (
        f"layerbench run {suite_path} --only method=a,model=gpt-2l,task=bytes --force"
    )
    notify(webhook, report)
    assert Hook.received == [report]


def test_alerts_are_listed_and_acknowledged(engine: Engine, suite_path: Path) -> None:
    for values in (steady(), steady(), steady({"a": 0.4})):
        outcome = night(engine, suite_path, values)
    (alert,) = outcome.alerts
    listed = invoke("alerts")
    assert listed.exit_code == 0
    assert f"#{alert.id}" in listed.output and "suspected" in listed.output
    assert invoke("alerts", "--ack", str(alert.id)).exit_code == 0
    assert "no alerts to acknowledge" in invoke("alerts").output
    assert "(acknowledged)" in invoke("alerts", "--all").output
    missing = invoke("alerts", "--ack", "999")
    assert missing.exit_code == 2 and "no alert #999" in missing.output
    assert stored_alerts(engine)[0].acknowledged


def test_rank_reads_the_latest_nightly_run(engine: Engine, suite_path: Path) -> None:
    night(engine, suite_path, steady())
    latest = night(engine, suite_path, steady({"a": 1.0}))
    keys = [t.key for t in plan_suite(load_suite(suite_path))]
    records = latest_results(engine, "tiny", keys)
    assert len(records) == 9
    latest_a = sorted(r.metrics["val_loss"] for r in records if r.method == "a")
    assert latest_a == pytest.approx(sorted(3.0 + e for e in SEED_EFFECT.values()))
    assert latest.run.kind == "nightly" and latest.run.environment["packages"]


def test_nightly_cli_errors_are_one_line(tmp_path: Path) -> None:
    none = invoke("nightly", str(tmp_path))
    assert none.exit_code == 2 and "has `cadence: nightly`" in none.output
    bad = invoke("schedule", "--cron", "61 * * * *", str(tmp_path))
    assert bad.exit_code == 2 and "is not a cron expression" in bad.output
    with pytest.raises(CronError):
        check_cron("every night")


def test_the_schedule_runs_the_job_when_its_cron_time_comes() -> None:
    clock = [datetime(2026, 5, 1, 1, 58, 30, tzinfo=UTC)]
    stop = threading.Event()
    ran: list[datetime] = []

    def wait(seconds: float) -> None:
        clock[0] += timedelta(seconds=seconds)

    def job() -> None:
        ran.append(clock[0])
        if len(ran) == 2:
            stop.set()

    run_schedule("0 2 * * *", job, stop, clock=lambda: clock[0], wait=wait)
    assert ran == [datetime(2026, 5, 1, 2, tzinfo=UTC), datetime(2026, 5, 2, 2, tzinfo=UTC)]
    stopped = threading.Event()
    stopped.set()
    run_schedule("* * * * *", job, stopped, clock=lambda: clock[0], wait=wait, run_now=True)
    assert len(ran) == 2  # a stopped schedule runs nothing


def test_skip_existing_runs_a_suite_once_per_commit_and_day(
    engine: Engine, suite_path: Path
) -> None:
    outcome = SuiteOutcome(suite_path, load_suite(suite_path))
    first = run_nightly_suite(
        engine, outcome, fake_executor(steady()), threading.Event(), "h", True
    )
    again = SuiteOutcome(suite_path, load_suite(suite_path))
    second = run_nightly_suite(engine, again, fake_executor(steady()), threading.Event(), "h", True)
    assert first.skipped is None and second.skipped.startswith("already run today")
    assert second.run.id == first.run.id and len(finished_nightly_runs(engine, "tiny")) == 1
