"""Architecture: imports flow one way (spec -> methods/models/tasks -> runner -> store ->
tracking -> ranking -> cli/leaderboard), checked by import-linter's contract in pyproject.toml."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.factories import ROOT


def test_no_module_imports_a_layer_above_it() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
