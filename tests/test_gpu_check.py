"""The prepared GPU check (benchmarks/gpu_check.py): its CPU-only dry run passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.gpu_check import equality, main, overlap
from harness.spec.sections import TrainSpec

pytestmark = pytest.mark.slow  # three `layerbench run`s


def test_the_dry_run_passes_and_writes_its_json_and_summary(tmp_path: Path) -> None:
    assert main(["--dry-run", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    steps = report["steps"]
    assert report["dry_run"] and steps["bf16"]["status"] == steps["placement"]["status"] == "passed"
    for trial in steps["bf16"]["trials"]:
        assert trial["tokens_per_s"] > 0 and 0 < trial["mfu"] < 1 and trial["peak_memory_bytes"]
    assert sorted(t["gpus_seen"] for t in steps["placement"]["trials"]) == ["0", "0", "1", "1"]
    if "parallel" not in TrainSpec.model_fields:
        assert "no `train.parallel`" in steps["ddp"]["message"]
    assert steps["ddp"]["status"] == "skipped"  # no 2 GPUs here
    summary = (tmp_path / "gpu_check.md").read_text()
    assert "| placement | passed |" in summary and "| ddp | skipped |" in summary


def test_the_equality_step_compares_the_loss_series_and_times_overlap() -> None:
    single = [{"train_loss": [2.0, 1.5]}]
    assert equality(single, [{"train_loss": [2.0, 1.5 * (1 + 5e-5)]}])["status"] == "passed"
    assert equality(single, [{"train_loss": [2.0, 1.5 * (1 + 5e-4)]}])["status"] == "failed"
    a, b = {"started": 0.0, "ended": 2.0}, {"started": 2.0, "ended": 3.0}
    assert not overlap(a, b) and overlap(a, {"started": 1.0, "ended": 3.0})
