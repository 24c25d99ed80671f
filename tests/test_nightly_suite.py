"""`layerbench nightly` and `layerbench schedule` on a real tiny suite (trials really train)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from harness.store.models import Result, SuiteRun, Trial
from tests.factories import invoke

SUITE = """\
suite: tiny-nightly
cadence: nightly
seeds: [0, 1, 2]
defaults:
  time_limit_s: 120
  train: {{steps: {steps}, batch_size: 8, warmup_steps: 2, eval_every: {steps}, eval_batches: 2}}
  optimizer: {{name: adamw, lr: 3.0e-3}}
models:
  gpt-2l: {{type: gpt, n_layers: 2, d_model: 32, n_heads: 2, max_seq_len: 64}}
tasks:
  bytes: {{type: lm, corpus: shakespeare, tokenizer: byte, seq_len: 32}}
methods:
  steady: {steady}
  slowed: {slowed}
  tolerant: {tolerant}
baseline: steady
"""
UNCHANGED = {"steady": "{}", "slowed": "{}", "tolerant": "{optimizer: {weight_decay: 0.0}}"}
# The changes a night brings: a learning rate 10x too small (slower learning), a tiny weight
# decay (a change well within the 2% tolerance), and an absurd learning rate (divergence).
SLOWER = {"slowed": "{optimizer: {lr: 3.0e-4}}", "tolerant": "{optimizer: {weight_decay: 0.01}}"}
DIVERGES = {"steady": "{optimizer: {lr: 1000.0}, train: {grad_clip: null}}"}


def write(directory: Path, steps: int = 20, **methods: str) -> None:
    directory.mkdir(exist_ok=True)
    (directory / "tiny.yaml").write_text(SUITE.format(steps=steps, **{**UNCHANGED, **methods}))


def nightly(directory: Path, reports: Path) -> tuple[int, dict]:
    args = ["nightly", str(directory), "--no-mlflow", "--workers", "2", "--reports", str(reports)]
    result = invoke(*args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    (report,) = reports.glob("nightly-*.json")
    return result.exit_code, json.loads(report.read_text())


def tolerant_values(url: str) -> dict[int, list[float]]:
    """The tolerant method's val_loss per nightly run, by seed."""
    query = (
        select(Trial.suite_run_id, Trial.seed, Result.value)
        .join(Result, Result.trial_id == Trial.id)
        .where(Trial.method == "tolerant", Result.name == "val_loss")
        .order_by(Trial.suite_run_id, Trial.seed)
    )
    values: dict[int, list[float]] = {}
    with Session(create_engine(url)) as session:
        for run_id, _, value in session.execute(query):
            values.setdefault(run_id, []).append(value)
    return values


@pytest.mark.slow
def test_nightly_runs_flag_a_slower_method_then_confirm_it_and_a_divergence(
    tmp_path: Path,
) -> None:
    suites, reports = tmp_path / "suites", tmp_path / "reports"
    write(suites)
    for _ in range(2):
        code, report = nightly(suites, reports)
        assert code == 0, report
        assert not any(report[k] for k in ("regressions", "suspected", "status_changes"))
    write(suites, **SLOWER)
    code, report = nightly(suites, reports)
    assert code == 0
    assert [(r["method"], r["kind"]) for r in report["suspected"]] == [("slowed", "suspected")]
    write(suites, **SLOWER, **DIVERGES)
    code, report = nightly(suites, reports)
    assert code == 3
    (regression,) = report["regressions"]
    assert regression["method"] == "slowed" and regression["direction"] == "worse"
    assert regression["new"]["mean"] > regression["old"]["mean"] * 1.02
    assert regression["p"] < 0.05 and regression["z"] == "inf"  # deterministic: no spread
    assert None not in regression["new"]["ci"] and None not in regression["old"]["ci"]
    (status,) = report["status_changes"]
    assert status["method"] == "steady"
    changes = {tuple(change) for change in status["detail"]["seeds"].values()}
    assert changes == {("done", "diverged")}
    text = (reports / f"nightly-{report['date']}.md").read_text()
    assert "slowed / gpt-2l / bytes** val_loss worse" in text and "p " in text and "z " in text
    # The tolerant method changed every night since the third, by less than the tolerance.
    values = list(tolerant_values(os.environ["LAYERBENCH_DB"]).values())
    assert values[0] == values[1] != values[2]
    assert max(abs(new / old - 1) for new, old in zip(values[2], values[1], strict=True)) < 0.02
    flagged = {r["method"] for k in ("regressions", "suspected", "improvements") for r in report[k]}
    assert "tolerant" not in flagged


@pytest.mark.slow
def test_schedule_stops_on_sigterm_without_leaving_a_trial_claimed(tmp_path: Path) -> None:
    suites = tmp_path / "suites"
    write(suites, steps=1_000_000)
    url = os.environ["LAYERBENCH_DB"]
    command = [sys.executable, "-m", "harness", "schedule", "--cron", "0 2 * * *", "--now"]
    schedule = subprocess.Popen(
        [*command, str(suites), "--no-mlflow", "--workers", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        running = wait_for_running_trials(url, schedule)
        schedule.send_signal(signal.SIGTERM)
        output, _ = schedule.communicate(timeout=60)
    finally:
        schedule.kill()
    assert running and schedule.returncode == 0, output
    assert "schedule stopped" in output
    with Session(create_engine(url)) as session:
        trials = session.execute(select(Trial.status, Trial.claimed_by)).all()
        run = session.scalars(select(SuiteRun)).one()
    assert trials and all(status == "pending" and claimed is None for status, claimed in trials)
    assert run.kind == "nightly" and run.status == "interrupted"


def wait_for_running_trials(url: str, process: subprocess.Popen[str]) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            with Session(create_engine(url)) as session:
                claimed = session.scalars(select(Trial.id).where(Trial.status == "running")).all()
        except OperationalError:  # the schedule has not created the tables yet
            claimed = []
        if len(claimed) == 2:
            return len(claimed)
        time.sleep(0.5)
    raise AssertionError(f"no trial started (exit code {process.poll()})")
