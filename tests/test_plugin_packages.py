"""Plugins installed as packages (entry-point group `layerbench.plugins`): found without a
suite's `plugins:`, their source in the keys of exactly their trials, a broken one named.

Each package is a module and a `.dist-info` (METADATA, entry_points.txt) in a temporary folder
put on the path of a subprocess only, so the shared environment never sees it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.factories import ROOT, write_suite

pytestmark = pytest.mark.slow  # subprocesses

PLUGIN = '''"""An installed plugin package for tests: a norm type."""

import torch
from torch import Tensor, nn

from harness.registry import NORM_TYPES

SHIFT = 0.0


class Centred(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x - x.mean(dim=-1, keepdim=True) + SHIFT


@NORM_TYPES.register("pkgnorm")
def pkgnorm(dim: int, role: str, eps: float) -> nn.Module:
    """Centring only (an installed test plugin)."""
    return Centred()
'''
METHODS = "pre-ln: {}\npkg: {norm: {type: pkgnorm}}"
SCRIPT = """
import json, sys
from harness.runner.trial import run_trial
from harness.spec import load_suite
from harness.spec.plan import plan_suite, trial_versions
from harness.store.coverage import version_changes

trials = plan_suite(load_suite(sys.argv[1]))
keys = {f"{t.method}/{t.seed}": t.key for t in trials}
pkg = next(t for t in trials if t.method == "pkg")
before = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None
changes = version_changes({"method_versions": before}, pkg.recipe) if before else []
status = run_trial(pkg.config).status if before is None else None
print(json.dumps({"keys": keys, "versions": trial_versions(pkg.recipe), "changes": changes,
                  "status": status}))
"""


def install(site: Path, name: str, source: str) -> None:
    """A package `name` 1.0 with one module and one `layerbench.plugins` entry point."""
    (site / f"{name}.py").write_text(source)
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[layerbench.plugins]\n{name} = {name}\n")


def python(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, check=False, cwd=ROOT
    )


def planned(site: Path, suite: Path, *before: str) -> dict:
    done = python(site, "-c", SCRIPT, str(suite), *before)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_installed_plugin_runs_and_its_edits_change_only_its_keys(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    install(site, "lbplugin", PLUGIN)
    suite = write_suite(tmp_path, METHODS, steps=2, eval_every=2)  # no `plugins:`
    first = planned(site, suite)
    assert first["status"] == "done"
    assert set(first["versions"]["plugins"]) == {"norm.type:pkgnorm"}
    listing = json.loads(python(site, "-m", "harness", "methods", "--json").stdout)
    origins = {entry["name"]: entry["origin"] for entry in listing["norm.type"]}
    assert origins["pkgnorm"] == "plugin lbplugin (package lbplugin 1.0)"
    assert origins["rmsnorm"] == "built-in"
    versions = python(site, "-m", "harness", "versions")
    assert "plugin entry norm.type:pkgnorm from plugin lbplugin" in versions.stdout

    (site / "lbplugin.py").write_text(PLUGIN.replace("SHIFT = 0.0", "SHIFT = 0.5"))
    second = planned(site, suite, json.dumps(first["versions"]))
    changed = {name for name, key in first["keys"].items() if second["keys"][name] != key}
    assert changed == {name for name in first["keys"] if name.startswith("pkg/")}
    assert second["changes"] and second["changes"][0].startswith("plugin norm.type:pkgnorm source")


def test_a_plugin_package_that_fails_to_import_is_named_in_one_message(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    install(site, "lbbroken", "import a_module_that_does_not_exist\n")
    suite = write_suite(tmp_path, "pre-ln: {}")
    for command in (["validate", str(suite)], ["methods"]):
        done = python(site, "-m", "harness", *command)
        assert done.returncode != 0
        assert "installed plugin package 'lbbroken' 1.0 cannot be imported" in done.stderr
        assert "No module named 'a_module_that_does_not_exist'" in done.stderr
        assert "Traceback" not in done.stderr + done.stdout
