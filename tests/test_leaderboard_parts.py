"""The leaderboard's pure parts: method families, filters, Pareto fronts, bands, regressions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.ranking import TrialOutcome
from harness.ranking.table import EMPTY
from harness.spec.declaration import RankingDeclaration
from leaderboard.charts import HeatmapScale, curve_bands, layer_heatmap, pareto_front
from leaderboard.filters import Selection, method_families, select
from leaderboard.links import mlflow_run_url
from leaderboard.tables import alerts_on_history, dashed

BASE = {
    "norm": {"placement": "pre", "type": "layernorm"},
    "optimizer": {"name": "adamw", "lr": 0.003, "layerwise": None},
    "train": {"steps": 100},
    "model": {"n_layers": 2},
    "seed": 0,
}


def test_a_method_family_is_what_it_changes_relative_to_the_baseline() -> None:
    configs = {
        "pre-ln": BASE,
        "post-ln": {**BASE, "norm": {"placement": "post", "type": "layernorm"}, "seed": 3},
        "lisa": {**BASE, "optimizer": {**BASE["optimizer"], "layerwise": {"name": "lisa"}}},
        "muon-long": {
            **BASE,
            "optimizer": {"name": "muon", "lr": 0.02, "layerwise": None},
            "train": {"steps": 200},
        },
        "prune-25": {**BASE, "prune": {"fraction": 0.25}, "model": {"n_layers": 4}},
    }
    assert method_families(configs, "pre-ln") == {
        "pre-ln": ("baseline",),
        "post-ln": ("normalization",),
        "lisa": ("layerwise",),
        "muon-long": ("optimizer", "training"),
        "prune-25": ("pruning",),
    }
    assert method_families(configs, "post-ln")["pre-ln"] == ("normalization",)


def outcome(method: str, task: str = "t", key: str = "") -> TrialOutcome:
    return TrialOutcome(method, "m", task, 0, "done", {"val_loss": 1.0}, key=key)


def test_select_keeps_the_chosen_run_tasks_and_families_and_always_the_baseline() -> None:
    outcomes = [outcome("base", key="k1"), outcome("norm", key="k2"), outcome("opt", "u", "k3")]
    families = {"base": ("baseline",), "norm": ("normalization",), "opt": ("optimizer",)}
    run_of = {"k1": 1, "k2": 1, "k3": 2}
    selection = Selection("s", None, ("t", "u"), ("m",), "val_loss", ("optimizer",), "base")
    assert [o.method for o in select(outcomes, selection, run_of, families)] == ["base", "opt"]
    in_run_1 = Selection("s", 1, ("t", "u"), ("m",), "val_loss", ("optimizer",), "base")
    assert [o.method for o in select(outcomes, in_run_1, run_of, families)] == ["base"]
    task_u = Selection("s", None, ("u",), ("m",), "val_loss", ("normalization",), "base")
    assert select(outcomes, task_u, run_of, families) == []


def test_pareto_front_keeps_only_undominated_points_in_each_direction() -> None:
    bits = np.array([4.0, 8.0, 8.0, 16.0])
    loss = np.array([2.0, 1.5, 1.8, 1.4])
    assert pareto_front(bits, loss, "min", "min").tolist() == [True, True, False, True]
    removed = np.array([1.0, 2.0, 3.0, 3.0])
    accuracy = np.array([0.9, 0.95, 0.8, 0.7])
    assert pareto_front(removed, accuracy, "max", "max").tolist() == [False, True, True, False]


def test_curve_bands_average_seeds_per_step_and_skip_missing_values() -> None:
    series = pd.DataFrame(
        {
            "method": ["a"] * 5,
            "step": [10, 10, 20, 20, 20],
            "train_time_s": [1.0, 3.0, 2.0, 4.0, 6.0],
            "value": [2.0, 4.0, 1.0, 3.0, np.nan],
        }
    )
    bands = curve_bands(series)
    assert bands["mean"].tolist() == [3.0, 2.0]
    assert bands["std"].tolist() == pytest.approx([np.sqrt(2), np.sqrt(2)])
    assert bands["seeds"].tolist() == [2, 2]
    assert bands["train_time_s"].tolist() == [2.0, 4.0]


def test_heatmaps_of_values_spanning_decades_are_drawn_in_log10_with_zeros_at_the_floor() -> None:
    vanishing = pd.Series([4e-9, 3e-7, 0.0187, 0.0])  # Post-LN's gradient norm by depth, and 0
    scale = HeatmapScale.of(vanishing)
    assert scale.log and scale.floor == 4e-9
    assert (scale.zmin, scale.zmax) == pytest.approx((np.log10(4e-9), np.log10(0.0187)))
    stats = pd.DataFrame({"step": [300] * 4, "layer": [0, 1, 2, 3], "value": vanishing})
    (heatmap,) = layer_heatmap(stats, "post-ln", scale).data
    assert np.asarray(heatmap.z).ravel() == pytest.approx(np.log10([4e-9, 3e-7, 0.0187, 4e-9]))
    narrow = HeatmapScale.of(pd.Series([1.0, 1.5, 5.63, np.inf]))  # within two decades: linear
    assert not narrow.log and (narrow.zmin, narrow.zmax) == (1.0, 5.63)
    assert not HeatmapScale.of(pd.Series([-1.0, 100.0])).log  # negative values: linear


def test_alerts_sit_on_the_curve_of_their_run_and_method() -> None:
    history = pd.DataFrame(
        {
            "run": ["#1", "#1", "#2", "#2"],
            "run_id": [1, 1, 2, 2],
            "task": ["t"] * 4,
            "model": ["m"] * 4,
            "method": ["a", "b", "a", "b"],
            "mean": [0.80, 0.70, 0.75, 0.72],
        }
    )
    alerts = pd.DataFrame(
        {
            "suite_run_id": [2, 2, 2],
            "task": ["t"] * 3,
            "model": ["m"] * 3,
            "method": ["b", "a", "a"],
            "metric": ["val_loss", "status", "accuracy"],
            "kind": ["regression", "status", "improvement"],
        }
    )
    placed = alerts_on_history(history, alerts, "val_loss")
    assert list(zip(placed["run"], placed["method"], placed["mean"], strict=True)) == [
        ("#2", "b", 0.72),
        ("#2", "a", 0.75),
    ]


def test_mlflow_links_need_a_server_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///mlflow.db")
    assert mlflow_run_url("abc") is None
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    assert mlflow_run_url("abc") == "http://mlflow:5000/#/runs/abc"
    assert mlflow_run_url(None) is None


def test_the_declared_baseline_is_the_default() -> None:
    from leaderboard.state import NO_BASELINE, baseline_index

    options = ["adamw", "muon", NO_BASELINE]
    assert baseline_index(RankingDeclaration(baseline="muon"), options) == 1
    assert baseline_index(RankingDeclaration(baseline=None), options) == 2
    assert baseline_index(None, options) == 0


def test_report_curves_plot_the_tuning_metric_when_the_ranked_one_has_no_series() -> None:
    """A held-out metric (test_loss) is measured once, at the end: the learning curves show the
    tuning metric (val_loss) then, not whichever series sorts first."""
    from leaderboard.charts import curve_metric

    preferred: list[str | None] = ["test_loss", "val_loss", "val_loss"]  # ranked, tuned, then
    assert curve_metric(["bits_per_byte", "id_acc", "val_loss"], preferred) == "val_loss"
    names = ["id_acc", "val_loss"]
    assert curve_metric(names, ["val_loss", None, "val_loss"]) == "val_loss"
    assert curve_metric(names, ["acc", None]) == "id_acc"
    assert curve_metric([], ["val_loss"]) is None


def test_the_board_shows_empty_values_as_an_en_dash_and_keeps_numbers_sortable() -> None:
    frame = pd.DataFrame(
        {
            "p (Holm)": [0.0305, None],
            "seeds needed": [None, 9],
            "tie group": ["1-2", None],
            "n": [5, 5],
        }
    )
    styler = dashed(frame, {"p (Holm)": ".3g"})
    html = styler.to_html()
    assert "None" not in html and "nan" not in html and "inf" not in html
    assert html.count(EMPTY) == 3 and "0.0305" in html and ">9<" in html
    shown = styler.data
    assert shown["p (Holm)"].dtype == float and shown["p (Holm)"].iloc[1] == np.inf  # sorts last
    assert list(shown["n"]) == [5, 5]
