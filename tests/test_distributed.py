"""Trials bigger than one process (issue 40): gradient accumulation equals the full batch, a
trial over two gloo ranks (DDP, FSDP2) equals the single process of the same global batch, and
a two-rank trial killed and resumed gives the numbers of one never interrupted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.records import PlannedTrial, TrialResult
from harness.runner.checkpoint_paths import CHECKPOINTS_ENV, trial_folder
from harness.runner.trial import run_trial
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from harness.trial_metrics import MEASURED_METRICS
from tests.factories import invoke, write_suite
from tests.test_finetune import finetune_suite, pretrained_dir_fixture, problems

__all__ = ["pretrained_dir_fixture"]  # the fixture, shared with tests/test_finetune.py

STEPS, INTERRUPT_AT = 20, 11


def trial_of(tmp_path: Path, train: str = "", resources: str = "") -> PlannedTrial:
    """The tiny suite's seed-0 trial in fp32 on the CPU, global batch 16, a loss each step."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    suite = write_suite(tmp_path, "pre-ln: {}", steps=STEPS, eval_every=10, extra=resources)
    body = (
        suite.read_text()
        .replace("batch_size: 8,", f"batch_size: 16, log_every: 1,{train}")
        .replace("time_limit_s: 120\n", "time_limit_s: 300\n  precision: fp32\n  device: cpu\n")
        .replace("seeds: [0, 1]", "seeds: [0]")
    )
    suite.write_text(body)
    (trial,) = plan_suite(load_suite(suite))
    return trial


def losses(trial: PlannedTrial, key: str | None = None) -> tuple[list[float], TrialResult]:
    """The loss of every step, and the result."""
    series: list[float] = []
    result = run_trial(trial.config, lambda step, total, loss: series.append(loss), key)
    assert result.status == "done", result.error
    return series, result


def relative_gap(one: list[float], other: list[float]) -> float:
    assert len(one) == len(other) == STEPS
    return max(abs(a - b) / abs(a) for a, b in zip(one, other, strict=True))


def comparable(result: TrialResult) -> tuple[Any, ...]:
    series = [(p.step, p.tokens, p.metrics) for p in result.series]
    final = {k: v for k, v in result.final.items() if k not in MEASURED_METRICS}
    return series, final, result.layer_stats, result.steps_done, result.tokens


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[float], TrialResult]:
    return losses(trial_of(tmp_path_factory.mktemp("single")))


def test_accumulating_two_micro_batches_of_8_equals_one_batch_of_16(
    tmp_path: Path, single: tuple[list[float], TrialResult]
) -> None:
    accumulated = trial_of(tmp_path, " micro_batch_size: 8,")
    assert accumulated.config["train"]["micro_batch_size"] == 8
    series, result = losses(accumulated)
    assert relative_gap(single[0], series) < 1e-6
    assert result.final["val_loss"] == pytest.approx(single[1].final["val_loss"], rel=1e-6)


def test_trials_without_accumulation_or_ranks_keep_their_config_and_key(tmp_path: Path) -> None:
    plain = trial_of(tmp_path / "plain")
    one_rank = trial_of(tmp_path / "one", " parallel: fsdp,", "resources: {tasks: 1, nodes: 1}\n")
    assert plain.key == one_rank.key and plain.config == one_rank.config
    assert "ranks" not in plain.config
    assert not {"micro_batch_size", "parallel"} & set(plain.config["train"])


def interrupt(step: int, total: int, loss: float) -> None:
    """Raises at step INTERRUPT_AT: the launcher kills the trial's ranks there."""
    if step == INTERRUPT_AT:
        raise KeyboardInterrupt


def run_killed_and_resumed(trial: PlannedTrial) -> TrialResult:
    """The trial killed at step INTERRUPT_AT (after its step-8 checkpoint), then run again."""
    with pytest.raises(KeyboardInterrupt):
        run_trial(trial.config, interrupt, key=trial.key)
    assert sorted(p.name for p in trial_folder(trial.key).glob("step-*")) == [
        "step-00000004.pt",
        "step-00000008.pt",
    ]
    resumed = run_trial(trial.config, key=trial.key)
    assert resumed.status == "done", resumed.error
    # The ranks run ahead of the trial process that reads their progress: by the time it stops
    # them at step 11 they may have finished a step or more, at most the checkpoint interval.
    assert resumed.resumes == 1 and INTERRUPT_AT - 8 <= resumed.recomputed_steps <= 4
    return resumed


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_gloo_ranks_equal_one_process_and_resume_to_identical_numbers(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    single: tuple[list[float], TrialResult],
    parallel: str,
) -> None:
    monkeypatch.setenv(CHECKPOINTS_ENV, str(tmp_path / "checkpoints"))
    trial = trial_of(
        tmp_path, f" parallel: {parallel}, checkpoint: {{every: 4}},", "resources: {tasks: 2}\n"
    )
    assert trial.config["ranks"] == 2 and trial.config["train"]["parallel"] == parallel
    series, whole = losses(trial)
    assert relative_gap(single[0], series) < 1e-5
    assert whole.final["val_loss"] == pytest.approx(single[1].final["val_loss"], rel=1e-5)
    assert whole.environment["ranks"] == 2
    assert len(whole.layer_stats) == len(single[1].layer_stats)  # the full model's, once
    assert comparable(run_killed_and_resumed(trial)) == comparable(whole)


def test_a_batch_that_does_not_split_over_the_ranks_is_refused_before_running(
    tmp_path: Path,
) -> None:
    suite = write_suite(tmp_path, "pre-ln: {}", extra="resources: {tasks: 3}\n")
    ran = invoke("run", str(suite), "--db", f"sqlite:///{tmp_path / 'r.db'}", "--no-mlflow")
    assert ran.exit_code == 2
    assert "`batch_size` 8 does not split over the trial's 3 ranks" in ran.output
    assert "Traceback" not in ran.output


def test_a_pretrained_model_over_several_ranks_is_refused_naming_its_line(
    tmp_path: Path, pretrained_dir: Path
) -> None:
    suite = finetune_suite(tmp_path, pretrained_dir)
    suite.write_text(suite.read_text() + "resources: {tasks: 2}\n")
    message = problems(suite)
    assert "models.tiny.type" in message
    assert "model 'tiny' is pretrained, which runs in one process" in message
