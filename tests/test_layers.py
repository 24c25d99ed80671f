"""Architecture: imports flow one way (stats -> spec -> methods/models/tasks -> claims -> runner
-> store -> tracking -> ranking -> service -> nightly -> cli/leaderboard), checked by
import-linter's contract in pyproject.toml, and no module imports itself through others."""

from __future__ import annotations

import os
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

from tests.factories import ROOT


def test_no_module_imports_a_layer_above_it() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_module_of_harness_imports_itself_through_others() -> None:
    """No import circle among harness's modules (imports inside functions count; those only
    for type checking do not, as in the contract): a circle hides a missing layer."""
    import grimp

    graph = grimp.build_graph("harness", exclude_type_checking_imports=True)
    imports = {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    try:
        TopologicalSorter(imports).prepare()
    except CycleError as error:
        pytest.fail(f"import circle: {' -> '.join(reversed(error.args[1]))}")
