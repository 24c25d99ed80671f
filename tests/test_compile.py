"""`train.compile`: a compiled training step trains the model an eager one trains."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.runner.trial import run_trial
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from harness.spec.resolve import resolve_compile
from tests.factories import write_suite

TOLERANCE = 1e-5
"""Relative: inductor fuses and reorders float32 reductions, so losses differ in the last
digits (measured on this suite: 6e-8 in the training loss, validation losses identical after 6
steps); a wrong graph differs by far more."""


def test_auto_compiles_on_cuda_only() -> None:
    assert resolve_compile("auto", "auto", cuda=True) is True
    assert resolve_compile("auto", "auto", cuda=False) is False
    assert resolve_compile("auto", "cpu", cuda=True) is False
    assert resolve_compile(True, "cpu", cuda=False) is True
    assert resolve_compile(False, "cuda", cuda=True) is False


def test_the_trial_key_holds_compile_only_when_the_trial_compiles(tmp_path: Path) -> None:
    eager = plan_suite(load_suite(write_suite(tmp_path, "pre-ln: {}")))
    compiled = plan_suite(load_suite(write_suite(tmp_path, "pre-ln: {train: {compile: true}}")))
    assert not any("compile" in t.config["train"] for t in eager)  # auto, on the CPU
    assert {t.config["train"]["compile"] for t in compiled} == {True}
    assert not {t.key for t in eager} & {t.key for t in compiled}


@pytest.mark.slow
def test_compiled_and_eager_losses_agree(tmp_path: Path) -> None:
    # Compiling takes minutes on a loaded machine: the time limit must not end the trial.
    methods = "pre-ln: {}\ncompiled: {train: {compile: true}, time_limit_s: 1800}"
    # One block of width 16 (still RoPE and SwiGLU): inductor compiles each block's kernels, so
    # this halves the compile time (40 -> 25 s on an idle 2-core machine) and tests the same path.
    suite = write_suite(tmp_path, methods, steps=6, eval_every=3, model="n_layers: 1, d_model: 16")
    trials = {t.method: t for t in plan_suite(load_suite(suite)) if t.seed == 0}
    eager, compiled = run_trial(trials["pre-ln"].config), run_trial(trials["compiled"].config)
    assert eager.status == compiled.status == "done", compiled.error
    for before, after in zip(eager.series, compiled.series, strict=True):
        for name in ("train_loss", "val_loss"):
            assert after.metrics[name] == pytest.approx(before.metrics[name], rel=TOLERANCE)
    assert compiled.final["test_loss"] == pytest.approx(eager.final["test_loss"], rel=TOLERANCE)
