"""The backends are registry entries (`harness.registry.BACKENDS`, declared in
harness/runner/catalog.py): `run`, `nightly` and `schedule` choose from it, an unknown name is
invalid input with the closest known one, and choosing a backend imports neither Ray nor
submitit. The backends themselves run in tests/test_ray.py and tests/test_slurm.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.registry import BACKENDS
from tests.factories import invoke


def test_the_backends_are_registered_and_choosing_one_imports_no_cluster_library() -> None:
    assert "local" in BACKENDS.names()  # the default; each registered one is imported below
    code = (
        "import sys; from harness.registry import BACKENDS; "
        "[BACKENDS.get(name) for name in BACKENDS.names()]; "
        "print([m for m in ('ray', 'submitit', 'torch') if m in sys.modules])"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "[]"


def test_an_unknown_backend_is_invalid_input_with_the_closest_name(tiny_suite: Path) -> None:
    ran = invoke("run", str(tiny_suite), "--backend", "spark")
    assert ran.exit_code == 2
    known = ", ".join(BACKENDS.names())
    assert "unknown backend 'spark'" in ran.output and f"known: {known}" in ran.output
    for command in ("nightly", "schedule"):
        args = [command, str(tiny_suite.parent), "--backend", "slrum"]
        typo = invoke(*args, *(["--cron", "0 2 * * *"] if command == "schedule" else []))
        assert typo.exit_code == 2, typo.output
        assert "did you mean 'slurm'?" in typo.output


def test_a_malformed_backend_option_of_a_nightly_run_is_invalid_input(
    tiny_suite: Path, tmp_path: Path
) -> None:
    tiny_suite.write_text(tiny_suite.read_text() + "cadence: nightly\n")
    args = ["nightly", str(tiny_suite.parent), "--reports", str(tmp_path / "reports")]
    ran = invoke(*args, "--no-mlflow", "--backend", "slurm", "--sbatch", "x")
    assert ran.exit_code == 2
    assert "--sbatch takes KEY=VALUE" in ran.output
