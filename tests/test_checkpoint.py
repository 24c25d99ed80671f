"""Checkpoints inside a trial and the exact resume from them (issue 39): for every optimizer and
every layerwise wrapper of the registry, a trial interrupted after a checkpoint and run again
gives the same loss series and final metrics, to the last digit, as one never interrupted."""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from sqlalchemy import select
from sqlalchemy.orm import Session

from benchmarks.reliability import environment, start
from harness.core import Status
from harness.lazy_registry import Registry
from harness.methods.optimizers import make_optimizer
from harness.records import PlannedTrial, TrialResult
from harness.registry import LAYERWISE, OPTIMIZERS
from harness.runner.checkpoint import (
    CheckpointError,
    Checkpoints,
    LoopState,
    Training,
    check_writable,
)
from harness.runner.checkpoint_paths import CHECKPOINTS_ENV, trial_folder
from harness.runner.timing import Clock
from harness.runner.trial import run_trial
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from harness.spec.sections import CheckpointSpec, OptimizerSpec
from harness.store.db import open_database
from harness.store.models import MetricPoint, Result, Trial
from harness.trial_metrics import MEASURED_METRICS
from tests.factories import invoke, tiny_llama, trials_by_key, write_suite

STEPS, INTERRUPT_AT = 6, 5
TIMING = set(MEASURED_METRICS)  # never identical between two runs
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


PRETRAINED_ONLY = {"lora"}
"""Wrappers of a Hugging Face model only (peft's LoRA): the built-in gpt trial here cannot use
them (`test_a_lora_fine_tune_resumes_to_identical_numbers` covers LoRA on a tiny Llama)."""


def built_in(registry: Registry[Any]) -> list[str]:
    """The names a catalog declares (lazily, by module path): not the stand-ins that tests and
    benchmarks register (benchmarks/faults.py's `hang` sleeps an hour a step)."""
    return [
        entry.name
        for entry in registry.entries()
        if entry.module is not None and entry.name not in PRETRAINED_ONLY
    ]


def methods() -> list[str]:
    """The suite's one method (named `pre-ln`, its baseline) for each built-in optimizer and
    wrapper."""
    optimizers = [f"pre-ln: {{optimizer: {{name: {name}}}}}" for name in built_in(OPTIMIZERS)]
    wrappers = [
        f"pre-ln: {{optimizer: {{name: adamw, layerwise: {wrapper_yaml(name)}}}}}"
        for name in built_in(LAYERWISE)
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

    monkeypatch.setattr(os, "fsync", fsync)
    result = run_trial(trial.config, key=trial.key)
    assert result.status == "failed" and result.failed_step == 4
    assert result.error is not None and "No space left on device" in result.error
    files = [p.name for p in trial_folder(trial.key).iterdir() if p.name != "reached"]
    assert files == ["step-00000002.pt"]


def test_trial_without_checkpoint_section_keeps_its_config(tmp_path: Path) -> None:
    suite = write_suite(tmp_path, "pre-ln: {}")
    assert all("checkpoint" not in t.config["train"] for t in plan_suite(load_suite(suite)))


def stored(url: str) -> dict[str, Any]:
    """Per trial key: status, resumes, recomputed steps, final metrics and metric series."""
    engine = open_database(url)
    with Session(engine) as session:
        trials = session.scalars(select(Trial)).all()
        return {
            t.key: (
                t.status,
                t.resumes,
                t.recomputed_steps,
                sorted(
                    (r.name, r.value)
                    for r in session.scalars(select(Result).where(Result.trial_id == t.id))
                    if r.name not in TIMING
                ),
                sorted(
                    (p.name, p.step, p.value)
                    for p in session.scalars(
                        select(MetricPoint).where(MetricPoint.trial_id == t.id)
                    )
                ),
            )
            for t in trials
        }


@pytest.mark.slow
def test_a_runner_killed_mid_trial_is_resumed_to_identical_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = write_suite(tmp_path, "pre-ln: {}", steps=60, eval_every=10)
    suite.write_text(
        suite.read_text()
        .replace("seeds: [0, 1]", "seeds: [0]")
        .replace("eval_batches: 2}", "eval_batches: 2, log_every: 1, checkpoint: {every: 5}}")
    )
    folder = tmp_path / "checkpoints"
    url = f"sqlite:///{tmp_path / 'killed.db'}"
    runner = start(suite, url, environment(tmp_path, LAYERBENCH_CHECKPOINTS=str(folder)))
    deadline = time.monotonic() + 300
    while not list(folder.glob("*/step-00000015.pt")) and time.monotonic() < deadline:
        time.sleep(0.05)
    runner.kill()
    runner.wait()
    (key,) = [p.name for p in folder.iterdir()]
    monkeypatch.setenv(CHECKPOINTS_ENV, str(folder))
    status = invoke("status", "--db", url).output
    assert "in progress: pre-ln/gpt-2l/bytes/s0 (last checkpoint at step" in status
    assert invoke("run", str(suite), "--db", url).exit_code == 0
    assert not (folder / key).exists()  # removed once the result is stored
    monkeypatch.setenv(CHECKPOINTS_ENV, str(tmp_path / "fresh"))
    whole_url = f"sqlite:///{tmp_path / 'whole.db'}"
    assert invoke("run", str(suite), "--db", whole_url).exit_code == 0
    resumed, whole = stored(url)[key], stored(whole_url)[key]
    assert resumed[0] == "done" and resumed[1] == 1 and resumed[2] <= 5
    assert resumed[3:] == whole[3:] and whole[1:3] == (0, 0)


def test_default_rule_runs_without_checkpoints_where_the_folder_is_not_writable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(CHECKPOINTS_ENV, str(blocker / "checkpoints"))
    (trial, *_) = plan_suite(load_suite(write_suite(tmp_path, "pre-ln: {}", steps=4)))
    assert run_trial(trial.config, key=trial.key).status == "done"


@pytest.mark.slow
def test_a_failed_trial_rerun_with_retry_failed_resumes_from_its_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin = "plugins: [tests.plugins.pidfile]\n"
    method = "pre-ln: {optimizer: {name: adamw-pidfile}}"
    suite = write_suite(tmp_path, method, steps=60, eval_every=10, extra=plugin)
    suite.write_text(
        suite.read_text()
        .replace("seeds: [0, 1]", "seeds: [0]")
        .replace("eval_batches: 2}", "eval_batches: 2, log_every: 1, checkpoint: {every: 5}}")
    )
    folder, pids = tmp_path / "checkpoints", tmp_path / "pids"
    pids.mkdir()
    url = f"sqlite:///{tmp_path / 'failed.db'}"
    env = environment(tmp_path, LAYERBENCH_CHECKPOINTS=str(folder), LAYERBENCH_TEST_PIDS=str(pids))
    runner = start(suite, url, env, "--no-mlflow")
    deadline = time.monotonic() + 300
    while not list(folder.glob("*/step-00000015.pt")) and time.monotonic() < deadline:
        time.sleep(0.05)
    (trial_pid,) = [int(p.name) for p in pids.iterdir()]
    os.kill(trial_pid, signal.SIGKILL)  # the trial's process, not the runner: stored `failed`
    assert runner.wait(timeout=120) == 1
    (key,) = [p.name for p in folder.iterdir()]
    assert trials_by_key(url)[key].status == "failed"
    assert list((folder / key).glob("step-*.pt"))  # kept for the retry
    monkeypatch.setenv(CHECKPOINTS_ENV, str(folder))
    monkeypatch.setenv("LAYERBENCH_TEST_PIDS", str(pids))
    retried = invoke("run", str(suite), "--db", url, "--no-mlflow", "--retry-failed")
    assert retried.exit_code == 0, retried.output
    monkeypatch.setenv(CHECKPOINTS_ENV, str(tmp_path / "fresh"))
    whole_url = f"sqlite:///{tmp_path / 'whole.db'}"
    assert invoke("run", str(suite), "--db", whole_url, "--no-mlflow").exit_code == 0
    resumed, whole = stored(url)[key], stored(whole_url)[key]
    assert resumed[0] == "done" and resumed[1] == 1 and resumed[2] <= 5
    assert resumed[3:] == whole[3:] and whole[1:3] == (0, 0)
    assert trials_by_key(url)[key].attempts == 2


LORA_STEPS, LORA_STOP = 6, 5


def lora_run(stop_after: int | None = None) -> tuple[list[float], dict[str, torch.Tensor], int]:
    """A tiny Llama fine-tuned with LoRA (peft's adapters, dropout on: the RNG matters) for
    LORA_STEPS steps, checkpointing every 2 under the key `lora`, resuming from its newest
    checkpoint; stopped after `stop_after` steps (a kill). Its losses, final weights, resumes."""
    model = tiny_llama(300, 2).train()
    spec = {"name": "adamw", "lr": 1e-2, "layerwise": {"name": "lora", "r": 4, "dropout": 0.1}}
    optimizer = make_optimizer(model, OptimizerSpec.model_validate(spec))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 / (1 + step))
    data = torch.Generator().manual_seed(0)
    training = Training(
        model,
        optimizer,
        scheduler,
        torch.amp.GradScaler("cpu", enabled=False),
        data,
        LoopState(),
        TrialResult(Status.RUNNING),
        Clock(),
    )
    checkpoints = Checkpoints("lora", "{}", CheckpointSpec(every=2))
    for step in range(checkpoints.resume(training) + 1, LORA_STEPS + 1):
        ids = torch.randint(0, 300, (2, 16), generator=data)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        training.loop.window.append(loss.item())
        if step < LORA_STEPS and checkpoints.due(step, False, 0.0):
            checkpoints.save(step, training)
        if step == stop_after:
            break
    return training.loop.window, model.state_dict(), training.result.resumes


def test_a_lora_fine_tune_resumes_to_identical_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LoRA (Hugging Face models only, so not in the registry-wide test above): the adapters,
    their optimizer group and the dropout's RNG come back from the checkpoint."""
    monkeypatch.setenv(CHECKPOINTS_ENV, str(tmp_path / "whole"))
    whole_losses, whole_weights, _ = lora_run()
    monkeypatch.setenv(CHECKPOINTS_ENV, str(tmp_path / "killed"))
    stopped, _, _ = lora_run(stop_after=LORA_STOP)
    assert len(stopped) == LORA_STOP
    resumed_losses, resumed_weights, resumes = lora_run()
    assert resumes == 1
    assert resumed_losses == whole_losses and len(whole_losses) == LORA_STEPS
    assert resumed_weights.keys() == whole_weights.keys()
    assert any("lora_" in name for name in whole_weights)
    assert all(torch.equal(resumed_weights[k], whole_weights[k]) for k in whole_weights)
