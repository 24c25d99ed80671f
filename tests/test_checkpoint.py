"""Checkpoints inside a trial and the exact resume from them (issue 39): for every optimizer and
every layerwise wrapper of the registry, a trial interrupted after a checkpoint and run again
gives the same loss series and final metrics, to the last digit, as one never interrupted."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from harness.records import PlannedTrial, TrialResult
from harness.registry import LAYERWISE, OPTIMIZERS
from harness.runner import checkpoint
from harness.runner.checkpoint import CHECKPOINTS_ENV, CheckpointError, check_writable, trial_folder
from harness.runner.trial import run_trial
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from tests.factories import write_suite

STEPS, INTERRUPT_AT = 6, 5
TIMING = {"tokens_per_s"}  # wall-clock figures, never identical between two runs
SMALL_RUN = {
    "lisa": {"active_layers": 1, "interval": 2},
    "llr": {"interval": 2, "ramp_steps": 2, "min_eigenvalues": 4},
    "wd_scale": {"base_width": 16},
}
"""Wrapper settings under which their schedules act within a six-step trial."""


class Interrupted(Exception):
    """Stands for a kill after step INTERRUPT_AT (the trial's process dies there)."""


def interrupt(step: int, total: int, loss: float) -> None:
    if step == INTERRUPT_AT:
        raise Interrupted


def methods() -> list[str]:
    """The suite's one method (named `pre-ln`, its baseline) for each optimizer and wrapper."""
    optimizers = [f"pre-ln: {{optimizer: {{name: {name}}}}}" for name in OPTIMIZERS.names()]
    wrappers = [
        f"pre-ln: {{optimizer: {{name: adamw, layerwise: {wrapper_yaml(name)}}}}}"
        for name in LAYERWISE.names()
    ]
    return optimizers + wrappers


def method_id(method: str) -> str:
    return method.split("name: ")[-1].split("}")[0].split(",")[0]


def wrapper_yaml(name: str) -> str:
    settings = {"name": name, **SMALL_RUN.get(name, {})}
    return "{" + ", ".join(f"{k}: {v}" for k, v in settings.items()) + "}"


def trial_of(tmp_path: Path, method: str, precision: str) -> PlannedTrial:
    suite = write_suite(tmp_path, method, steps=STEPS, eval_every=3)
    body = suite.read_text().replace(
        "eval_batches: 2}", "eval_batches: 2, log_every: 1, checkpoint: {every: 2}}"
    )
    body = body.replace(
        "time_limit_s: 120\n", f"time_limit_s: 120\n  precision: {precision}\n  device: cpu\n"
    )
    suite.write_text(body)
    return next(t for t in plan_suite(load_suite(suite)) if t.seed == 0)


def comparable(result: TrialResult) -> tuple[Any, ...]:
    series = [(p.step, p.tokens, p.metrics) for p in result.series]
    final = {k: v for k, v in result.final.items() if k not in TIMING}
    return result.status, series, final, result.layer_stats, result.steps_done, result.tokens


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("method", methods(), ids=method_id)
def test_interrupted_trial_resumes_to_identical_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, precision: str
) -> None:
    monkeypatch.setenv(CHECKPOINTS_ENV, str(tmp_path / "checkpoints"))
    trial = trial_of(tmp_path, method, precision)
    whole = run_trial(trial.config)
    assert whole.status == "done", whole.error
    stopped = run_trial(trial.config, interrupt, key=trial.key)
    assert stopped.status == "failed" and stopped.steps_done == INTERRUPT_AT
    assert sorted(p.name for p in trial_folder(trial.key).glob("step-*")) == [
        "step-00000002.pt",
        "step-00000004.pt",
    ]
    resumed = run_trial(trial.config, key=trial.key)
    assert resumed.status == "done", resumed.error
    assert comparable(resumed) == comparable(whole)
    assert (resumed.resumes, resumed.recomputed_steps) == (1, INTERRUPT_AT - 4)


def test_corrupt_newest_checkpoint_falls_back_to_the_previous(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(CHECKPOINTS_ENV, str(tmp_path / "checkpoints"))
    trial = trial_of(tmp_path, "pre-ln: {}", "fp32")
    whole = run_trial(trial.config)
    run_trial(trial.config, interrupt, key=trial.key)
    newest = trial_folder(trial.key) / "step-00000004.pt"
    newest.write_bytes(newest.read_bytes()[:-100])  # a partial write
    resumed = run_trial(trial.config, key=trial.key)
    assert comparable(resumed) == comparable(whole)
    assert resumed.recomputed_steps == INTERRUPT_AT - 2
    assert "step-00000004.pt is unreadable (checksum mismatch)" in caplog.text


def test_checkpoint_of_another_trial_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(CHECKPOINTS_ENV, str(tmp_path / "checkpoints"))
    trial = trial_of(tmp_path, "pre-ln: {}", "fp32")
    run_trial(trial.config, interrupt, key="other")
    trial_folder("other").rename(trial_folder(trial.key))
    resumed = run_trial(trial.config, key=trial.key)
    assert resumed.status == "done" and resumed.resumes == 0
    assert "of another trial or method version: refused" in caplog.text


def test_unwritable_checkpoint_folder_fails_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a folder under a file cannot be made, even by root
    monkeypatch.setenv(CHECKPOINTS_ENV, str(blocker / "checkpoints"))
    trial = trial_of(tmp_path, "pre-ln: {}", "fp32")
    result = run_trial(trial.config, key=trial.key)
    assert result.status == "failed" and result.steps_done == 0
    assert result.error is not None and "is not writable" in result.error
    assert CHECKPOINTS_ENV in result.error and "Traceback" not in result.error
    with pytest.raises(CheckpointError):
        check_writable(blocker / "x")


def test_full_disk_keeps_the_previous_checkpoint_and_fails_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CHECKPOINTS_ENV, str(tmp_path / "checkpoints"))
    trial = trial_of(tmp_path, "pre-ln: {}", "fp32")
    real_fsync, calls = os.fsync, []

    def fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) > 2:  # the first checkpoint (file and folder) fits, the second does not
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(checkpoint.os, "fsync", fsync)
    result = run_trial(trial.config, key=trial.key)
    assert result.status == "failed" and result.failed_step == 4
    assert result.error is not None and "No space left on device" in result.error
    files = [p.name for p in trial_folder(trial.key).iterdir() if p.name != "reached"]
    assert files == ["step-00000002.pt"]


def test_trial_without_checkpoint_section_keeps_its_config(tmp_path: Path) -> None:
    suite = write_suite(tmp_path, "pre-ln: {}")
    assert all("checkpoint" not in t.config["train"] for t in plan_suite(load_suite(suite)))
