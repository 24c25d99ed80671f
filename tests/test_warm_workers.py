"""Warm workers (harness/runner/warm.py): a trial forked from the warmed fork server stores
exactly what the same trial stores when it builds everything itself, on the threads its suite
gives it however many trials run beside it."""

from __future__ import annotations

import gc
import os
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path

import pytest
import torch

from harness.runner import warm
from harness.runner.local import context, forked_trial, run_local
from harness.runner.trial import run_trial
from harness.runner.warm import train_task, warm_spec
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from harness.spec.sections import QuantizeSpec
from harness.tasks.lm import LMTask
from tests.factories import MemoryLedger, stored, write_suite

RTN = QuantizeSpec(scheme="rtn")


@pytest.mark.slow
def test_a_trial_stores_the_same_warm_or_cold_on_its_suites_threads_whatever_the_workers(
    tmp_path: Path, fresh_server: None
) -> None:
    trials = plan_suite(load_suite(write_suite(tmp_path, "pre-ln: {}", steps=6, eval_every=3)))
    alone, beside = MemoryLedger(), MemoryLedger()
    run_local(trials, alone, workers=1)  # it used to get cpu_count // workers threads
    run_local(trials, beside, workers=2)
    cold = {trial.key: run_trial(trial.config) for trial in trials}  # on the trial's threads
    assert set(alone.results) == set(beside.results) == set(cold) == {t.key for t in trials}
    assert len(cold) == 2
    for key, result in cold.items():
        assert result.status == "done", result.error
        warm = alone.results[key], beside.results[key]
        assert [r.environment["threads"] for r in warm] == [1, 1]
        assert stored(warm[0]) == stored(warm[1]) == stored(result)
    suite = write_suite(tmp_path, "pre-ln: {}", steps=2, eval_every=2, extra="resources: {cpus: 2}")
    two = MemoryLedger()
    run_local(plan_suite(load_suite(suite))[:1], two, workers=2)
    assert [r.environment["threads"] for r in two.results.values()] == [2]


def test_warm_up_prebuilds_the_suite_tasks_with_the_data_a_trial_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(warm, "_tasks", {})
    trial = plan_suite(load_suite(write_suite(tmp_path, "pre-ln: {}")))[0]
    spec = warm_spec([trial, trial])
    assert spec["tasks"] == [trial.config["task"]]
    assert warm.prebuilt_task(trial.recipe.task) is None
    warm.warm_up(spec)
    _, entry = trial.recipe.trained_entries()
    prebuilt, built = warm.prebuilt_task(trial.recipe.task), train_task(entry, trial.recipe.task)
    assert isinstance(prebuilt, LMTask) and isinstance(built, LMTask)
    assert prebuilt.vocab_size == built.vocab_size
    assert prebuilt.tokens.keys() == built.tokens.keys()
    for split, tokens in prebuilt.tokens.items():
        assert torch.equal(tokens, built.tokens[split])


def test_the_server_imports_the_model_stack_only_for_suites_that_use_it(tmp_path: Path) -> None:
    """transformers' model stack takes seconds to import: a suite that only trains the
    built-in gpt starts its fork server without it; a quantizing suite warms it up."""
    trained = plan_suite(load_suite(write_suite(tmp_path, "pre-ln: {}")))
    quantized = replace(trained[0], recipe=replace(trained[0].recipe, quantize=RTN))
    assert warm_spec(trained)["imports"] == []
    assert warm_spec([*trained, quantized])["imports"] == list(warm.MODEL_STACK)


@pytest.mark.slow
def test_a_server_without_the_model_stack_is_replaced_for_a_suite_that_uses_it(
    tmp_path: Path, fresh_server: None
) -> None:
    """nightly runs suites in turn in one process: a suite that quantizes after one that only
    trains gets a server that imports the stack once, not each of its trials."""
    context()
    trained = plan_suite(load_suite(write_suite(tmp_path, "pre-ln: {}")))
    quantized = replace(trained[0], recipe=replace(trained[0].recipe, quantize=RTN))
    warm.start_server(trained)
    first = warm._server_pid()
    warm.start_server(trained)
    assert warm._server_pid() == first  # it has what these trials use
    warm.start_server([quantized])
    second = warm._server_pid()
    assert second not in (None, first)
    warm.start_server(trained)
    assert warm._server_pid() == second  # the stack is more than these trials need


@pytest.mark.slow
@pytest.mark.parametrize("variable", ["LAYERBENCH_DATA", "LAYERBENCH_CACHE"])
def test_a_server_started_under_another_data_folder_is_replaced(
    tmp_path: Path, fresh_server: None, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """A forked trial reads the fork server's environment: a runner whose prepared-data folder
    (`LAYERBENCH_DATA`) or cache (`LAYERBENCH_CACHE`: converted models, tokenizers) changed
    gets a new server, so its trials read the folder it names."""
    context()
    trials = plan_suite(load_suite(write_suite(tmp_path, "pre-ln: {}")))
    monkeypatch.setenv(variable, str(tmp_path / "a"))
    warm.start_server(trials)
    first = warm._server_pid()
    warm.start_server(trials)
    assert warm._server_pid() == first
    monkeypatch.setenv(variable, str(tmp_path / "b"))
    warm.start_server(trials)
    assert warm._server_pid() not in (None, first)


def test_a_forked_trial_gets_the_environment_it_is_given_before_the_trial_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Ray task's trial is forked from a server that started with an earlier task's
    environment: `forked_trial` sets (or removes) what the task hands it, e.g. its GPUs."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # the server's, from the worker's first task
    monkeypatch.setenv("LAYERBENCH_PROBE", "stale")
    seen: dict[str, str | None] = {}

    def probe(conn: object, config: dict[str, object], key: str | None = None) -> None:
        seen.update(
            {name: os.environ.get(name) for name in ("CUDA_VISIBLE_DEVICES", "LAYERBENCH_PROBE")}
        )

    monkeypatch.setattr("harness.runner.trial.trial_process", probe)
    forked_trial(None, {}, {"CUDA_VISIBLE_DEVICES": "3", "LAYERBENCH_PROBE": None})  # type: ignore[arg-type]
    assert seen == {"CUDA_VISIBLE_DEVICES": "3", "LAYERBENCH_PROBE": None}


def collector_state(conn: Connection) -> None:
    """A forked process's target: is its garbage collector on, and how many objects are frozen?"""
    conn.send((gc.isenabled(), gc.get_freeze_count()))
    conn.close()


@pytest.mark.slow
def test_a_forked_trial_collects_garbage_and_leaves_the_servers_frozen_heap_alone(
    tmp_path: Path, fresh_server: None
) -> None:
    """The server imports and warms up with the collector paused (`warm_start`), then freezes
    what it built and resumes it, so each trial process collects its own garbage and never
    scans (and so copies) the pages it shares with the server."""
    ctx = context()
    warm.start_server(plan_suite(load_suite(write_suite(tmp_path, "pre-ln: {}"))))
    receiver, sender = ctx.Pipe(duplex=False)
    process = ctx.Process(target=collector_state, args=(sender,))
    process.start()
    sender.close()
    enabled, frozen = receiver.recv()
    process.join(timeout=10)
    assert enabled
    assert frozen > 100_000  # torch and the harness, imported by the server
