"""A method added as docs/extending.md says: one source file (tests/plugins/meannorm.py),
registered from a suite's `plugins:`, and this one test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from harness.registry import NORM_TYPES
from harness.runner.trial import build, prepare, run_trial
from harness.spec import SuiteError, load_suite
from harness.spec.plan import plan_suite

PLUGIN = "plugins: [tests.plugins.meannorm]\n"


@pytest.fixture(autouse=True)
def plugin_registered_for_this_test_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test imports the plugin afresh into a scope of the norm registry, so the rest of the
    session (which lists the registry whole) never sees `meannorm`."""
    monkeypatch.delitem(sys.modules, "tests.plugins.meannorm", raising=False)
    with NORM_TYPES.scoped():
        yield
    assert "meannorm" not in NORM_TYPES


@pytest.mark.slow
def test_a_plugin_norm_validates_builds_and_trains(write_suite, tmp_path: Path) -> None:
    methods = "pre-ln: {}\nmean: {norm: {type: meannorm, gain_init: 0.5}}"
    suite = load_suite(write_suite(tmp_path, methods, steps=2, eval_every=2, extra=PLUGIN))
    trial = next(t for t in plan_suite(suite) if t.method == "mean")
    model = build(prepare(trial.config)).model
    norm = model.blocks[0].placement.norm1
    from tests.plugins.meannorm import MeanNorm

    assert isinstance(norm, MeanNorm) and torch.equal(norm.weight, torch.full((32,), 0.5))
    result = run_trial(trial.config)
    assert result.status == "done", result.error


def test_a_plugin_norms_fields_are_checked(write_suite, tmp_path: Path) -> None:
    methods = "pre-ln: {}\nmean: {norm: {type: meannorm, gain_int: 0.5}}"
    with pytest.raises(SuiteError, match="did you mean 'gain_init'"):
        load_suite(write_suite(tmp_path, methods, extra=PLUGIN))


def test_a_plugin_entry_without_source_is_refused_with_its_name(
    write_suite, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `functools.partial` has no source a digest could version its trials by: the suite is
    refused at validation with one sentence naming the entry, not a traceback at planning."""
    monkeypatch.delitem(sys.modules, "tests.plugins.partialnorm", raising=False)
    path = write_suite(tmp_path, "pre-ln: {}", extra="plugins: [tests.plugins.partialnorm]\n")
    with pytest.raises(SuiteError, match=r"plugin entry 'halfnorm' of .* no readable source"):
        load_suite(path)
