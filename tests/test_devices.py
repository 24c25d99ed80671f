"""Devices where the trials run (issue 40): a suite asking for CUDA on a machine without it is
refused before any trial, with its line; a cluster trial without a GPU fails with one sentence;
the local runner gives each trial its own GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.runner.local import run_local
from harness.runner.placement import GpuPool, Placement
from harness.runner.trial import run_trial
from harness.spec import SuiteError, load_suite
from harness.spec.plan import plan_suite
from tests.factories import MemoryLedger, invoke, write_suite


def test_device_cuda_without_cuda_is_refused_with_its_line_before_any_trial(
    tmp_path: Path,
) -> None:
    suite = write_suite(tmp_path, "pre-ln: {}\ngpu:\n  device: cuda", steps=2, eval_every=2)
    db = tmp_path / "results.db"
    result = invoke("run", str(suite), "--db", f"sqlite:///{db}", "--no-mlflow")
    assert result.exit_code == 2
    line = suite.read_text().splitlines().index("    device: cuda") + 1
    assert f"{suite}:{line}: methods.gpu.device: device 'cuda' asks for a GPU" in result.output
    assert "set `device: auto`" in result.output and "Traceback" not in result.output
    assert not db.exists()  # refused before the store was even opened: no trial row


def test_the_check_names_the_line_that_sets_the_device_and_the_gpus_asked_for(
    tmp_path: Path,
) -> None:
    methods = "pre-ln: {}\nchild:\n  extends: parent\nparent:\n  device: cuda:1"
    path = write_suite(tmp_path, methods, extra="resources: {gpus: 4}\n")
    with pytest.raises(SuiteError) as refused:
        load_suite(path, gpus=1)
    found = {(p.path, p.message.split(";")[0]) for p in refused.value.problems}
    assert found == {
        (
            "methods.parent.device",
            "device 'cuda:1' names a GPU this machine does not have (it has 1)",
        ),
        ("resources.gpus", "each trial asks for 4 GPUs but this machine has 1"),
    }
    assert load_suite(path, gpus=4) and load_suite(path)  # unchecked: a cluster's suite


def test_a_worker_without_cuda_fails_the_trial_with_one_sentence(tmp_path: Path) -> None:
    trial = plan_suite(load_suite(write_suite(tmp_path, "pre-ln: {device: cuda}", steps=2)))[0]
    result = run_trial(trial.config)
    assert result.status == "failed" and "Traceback" not in (result.error or "")
    assert result.error is not None and result.error.startswith(
        "device 'cuda' was asked for but no CUDA device is reachable on "
    )


@pytest.mark.slow
def test_the_local_runner_gives_each_trial_its_own_gpu(tmp_path: Path, fresh_server: None) -> None:
    path = write_suite(tmp_path, "pre-ln: {device: cpu}\nb: {device: cpu}", steps=2, eval_every=2)
    trials = plan_suite(load_suite(path))
    ledger = MemoryLedger()
    run_local(trials, ledger, workers=2, placement=Placement(GpuPool.of_count(2), gpus=1))
    seen = [result.environment["cuda_visible_devices"] for result in ledger.results.values()]
    assert len(seen) == 4 and set(seen) <= {"0", "1"}


def test_gpus_asked_for_on_a_machine_without_any_are_refused_whatever_the_device(
    tmp_path: Path,
) -> None:
    path = write_suite(tmp_path, "pre-ln: {}", extra="resources: {gpus: 1}\n")
    with pytest.raises(SuiteError, match="each trial asks for 1 GPU but this machine has 0"):
        load_suite(path, gpus=0)
