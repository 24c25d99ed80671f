"""`precision: auto` (issue 14): bf16 on CUDA, fp32 on the CPU, resolved into the trial key."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from harness.runner.trial import run_trial
from harness.spec import load_suite, plan
from harness.spec.plan import plan_suite
from harness.spec.resolve import resolve_precision


@pytest.mark.parametrize(
    ("precision", "device", "cuda", "resolved"),
    [
        ("auto", "auto", False, "fp32"),
        ("auto", "auto", True, "bf16"),
        ("auto", "cpu", True, "fp32"),
        ("auto", "cuda:0", False, "bf16"),
        ("fp16", "cuda", True, "fp16"),
        ("fp32", "cuda", True, "fp32"),
    ],
)
def test_auto_resolves_per_device(precision: str, device: str, cuda: bool, resolved: str) -> None:
    assert resolve_precision(precision, device, cuda) == resolved


METHODS = "pre-ln: {}\nfp32: {precision: fp32}\nbf16: {precision: bf16}"
# The same methods eager everywhere, so their keys differ by precision alone (`train.compile: auto`
# compiles on CUDA).
EAGER_METHODS = """
pre-ln: {train: {compile: false}}
fp32: {precision: fp32, train: {compile: false}}
bf16: {precision: bf16, train: {compile: false}}
"""


def keys(suite_path: Path) -> dict[str, tuple[str, str]]:
    trials = plan_suite(load_suite(suite_path))
    return {t.method: (t.config["precision"], t.key) for t in trials if t.seed == 0}


def test_the_resolved_precision_goes_into_the_key(
    write_suite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = write_suite(tmp_path, EAGER_METHODS)
    monkeypatch.setattr(plan, "cuda_available", lambda: False)
    cpu = keys(suite)
    assert cpu["pre-ln"][0] == "fp32" and cpu["bf16"][0] == "bf16"
    assert cpu["bf16"][1] != cpu["fp32"][1]
    monkeypatch.setattr(plan, "cuda_available", lambda: True)
    gpu = keys(suite)
    assert gpu["pre-ln"][0] == "bf16" and gpu["pre-ln"][1] != cpu["pre-ln"][1]
    assert gpu["fp32"] == cpu["fp32"] and gpu["bf16"] == cpu["bf16"]


def test_a_suite_that_states_its_gpus_plans_the_same_keys_on_any_machine(
    write_suite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_gpus = write_suite(tmp_path, EAGER_METHODS, extra="resources: {gpus: 1}\n")
    planned = []
    for here in (False, True):  # a login node without a GPU, then a GPU node
        monkeypatch.setattr(plan, "cuda_available", lambda here=here: here)
        planned.append(keys(on_gpus))
    assert planned[0] == planned[1] and planned[0]["pre-ln"][0] == "bf16"
    on_cpus = write_suite(tmp_path, EAGER_METHODS, extra="resources: {gpus: 0}\n")
    assert keys(on_cpus)["pre-ln"][0] == "fp32"  # cuda_available is still True


@pytest.mark.slow
def test_a_bf16_trial_tracks_fp32(write_suite, tmp_path: Path) -> None:
    suite = write_suite(tmp_path, METHODS, steps=12, eval_every=6)
    trials = {t.method: t for t in plan_suite(load_suite(suite)) if t.seed == 0}
    fp32, bf16 = (run_trial(trials[name].config) for name in ("fp32", "bf16"))
    assert fp32.status == bf16.status == "done", (fp32.error, bf16.error)
    for a, b in zip(fp32.series, bf16.series, strict=True):
        assert math.isclose(a.metrics["val_loss"], b.metrics["val_loss"], rel_tol=0.02)
    assert fp32.final["val_loss"] != bf16.final["val_loss"]  # bf16 did run in bf16
