"""benchmarks/pair_models.py on the committed findings databases: whether the paired trials of a
compression comparison compressed the same trained model (docs/results/findings.md, "Trained
models across sessions")."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.pair_models import pairs

DATA = Path(__file__).parents[1] / "docs" / "results" / "data"


def test_shortgpt_random_baseline_gaps_are_small_beside_every_difference() -> None:
    found = pairs(str(DATA / "findings-shortgpt.db"), "bi-3", "random-3", draws=True)
    assert len(found) == 18  # 9 seeds x 2 recipes
    gaps = [abs(gap) for _, _, gap, _, _ in found]
    assert max(gaps) == pytest.approx(0.0284, abs=1e-4)
    assert all(diff < -29 * abs(gap) for _, _, gap, diff, _ in found)
    same_session = [
        gap for _, _, gap, _, started in found if started.split(" / ")[0] >= "2026-12-04"
    ]
    assert same_session and all(gap == 0 for gap in same_session)


def test_the_discarded_layerwise_quant_rerun_trained_another_model_on_seed_0() -> None:
    found = pairs(
        str(DATA / "findings-layerwise-quant-draws16.db"), "lq-cosine", "lq-random", draws=True
    )
    (seed_0,) = [row for row in found if row[1] == 0]
    assert seed_0[2] == pytest.approx(-0.1763, abs=1e-4)  # 2.374 against 2.550 before quantization
    single = pairs(str(DATA / "findings-layerwise-quant.db"), "lq-cosine", "lq-random", draws=False)
    assert len(single) == 12 and all(gap == 0 for _, _, gap, _, _ in single)
