"""Warm workers (harness/runner/warm.py): a trial forked from the warmed fork server stores
exactly what the same trial stores when it builds everything itself."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from multiprocessing import forkserver
from pathlib import Path

import pytest
import torch

from harness.records import PlannedTrial, TrialResult
from harness.runner import warm
from harness.runner.local import run_local, threads_per_trial
from harness.runner.plan import plan_suite
from harness.runner.trial import run_trial, train_task
from harness.runner.warm import warm_spec
from harness.spec import load_suite
from harness.tasks.lm import LMTask
from tests.helpers import write_suite


class MemoryLedger:
    """A ledger that lets this runner claim every trial and keeps the results."""

    def __init__(self) -> None:
        self.results: dict[str, TrialResult] = {}

    def claim(self, trial: PlannedTrial) -> bool:
        return True

    def heartbeat(self, trial: PlannedTrial) -> None:
        pass

    def finish(self, trial: PlannedTrial, result: TrialResult) -> None:
        self.results[trial.key] = result

    def release(self, trial: PlannedTrial) -> None:
        pass


@pytest.fixture
def fresh_server() -> Iterator[None]:
    """No fork server left over from another test: run_local starts one warmed for this suite."""
    forkserver._forkserver._stop()  # type: ignore[attr-defined]
    yield


def stored(result: TrialResult) -> tuple[object, ...]:
    """What the store keeps of a trial, less its timings and environment."""
    return (
        result.status,
        result.final | {"tokens_per_s": None},
        [(p.step, p.tokens, p.metrics) for p in result.series],
        result.layer_stats,
        result.steps_done,
        result.tokens,
    )


@pytest.mark.slow
def test_a_warm_worker_stores_the_same_losses_as_a_cold_process(
    tmp_path: Path, fresh_server: None
) -> None:
    suite = write_suite(tmp_path, "pre-ln: {}", steps=6, eval_every=3)
    trials = plan_suite(load_suite(suite))
    warm = MemoryLedger()
    run_local(trials, warm, workers=1)
    threads = torch.get_num_threads()
    torch.set_num_threads(threads_per_trial(1))
    try:
        cold = {trial.key: run_trial(trial.config) for trial in trials}
    finally:
        torch.set_num_threads(threads)
    assert set(warm.results) == set(cold) and len(cold) == 2
    for key, result in cold.items():
        assert result.status == "done"
        assert stored(warm.results[key]) == stored(result)


def test_warm_up_prebuilds_the_suite_tasks_with_the_data_a_trial_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(warm, "_tasks", {})
    monkeypatch.setattr(gc, "freeze", lambda: None)  # the fork server's, not the test's heap
    trial = plan_suite(load_suite(write_suite(tmp_path, "pre-ln: {}")))[0]
    spec = warm_spec([trial, trial])
    (section,) = spec["tasks"]
    assert warm.prebuilt_task(section) is None
    warm.warm_up(spec)
    prebuilt, built = warm.prebuilt_task(dict(section)), train_task(section)
    assert isinstance(prebuilt, LMTask) and isinstance(built, LMTask)
    assert prebuilt.vocab_size == built.vocab_size
    assert prebuilt.tokens.keys() == built.tokens.keys()
    for split, tokens in prebuilt.tokens.items():
        assert torch.equal(tokens, built.tokens[split])
