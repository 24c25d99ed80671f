"""One table model for every output, the overall aggregates, and example-level statistics."""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from scipy import stats

from harness.core import Status
from harness.ranking import Ranking, TrialOutcome, format_ranking, group_table, rank, tables
from harness.runner.trial import build, prepare
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from harness.spec.rank import RankSpec
from harness.stats.examples import mcnemar_test, weight_name, wilson_ci
from harness.store.db import make_engine, upgrade
from harness.tasks.base import weight_name as task_weight_name
from leaderboard.tables import MARKS, rows_frame, summary_frame
from tests import factories
from tests.factories import ROOT, fake_result, planned, store, write_suite


def outcomes(method: str, values: Sequence[float | None], task: str = "lm") -> list[TrialOutcome]:
    return factories.outcomes(method, values, task=task, keyed=True)


@pytest.fixture
def ranking() -> Ranking:
    runs = outcomes("base", [1.0, 1.2, 1.1]) + outcomes("new", [0.8, 0.9, None])
    runs += outcomes("base", [2.0, 2.1], task="copy") + outcomes("new", [2.05, 2.1], task="copy")
    return rank(runs, "val_loss", "base")


def test_md_json_and_leaderboard_render_the_same_table(ranking: Ranking) -> None:
    groups, overall = tables(ranking)
    md = format_ranking(ranking, "md")
    for section in groups.sections:
        for row in section.rows:
            assert "| " + " | ".join(cell.text for cell in row) + " |" in md
    data = json.loads(format_ranking(ranking, "json"))
    assert data["tables"] == [groups.to_dict(), overall.to_dict()]
    frame = rows_frame(ranking, {})
    shown = frame[groups.header].astype(object).where(frame[groups.header].notna(), None)
    expected = [[cell.value for cell in row] for s in groups.sections for row in s.rows]
    verdict = groups.header.index("verdict")
    for row in expected:
        row[verdict] = MARKS.get(row[verdict] or "", "")
    assert shown.values.tolist() == expected
    summary = summary_frame(ranking, {}).drop(columns="family")
    summary = summary.astype(object).where(summary.notna(), None)
    assert summary.values.tolist() == [[c.value for c in row] for row in overall.sections[0].rows]
    assert "None" not in md and "nan" not in md


def test_the_ranking_and_the_leaderboard_agree_on_every_failure_count() -> None:
    statuses = [Status.DONE, Status.DIVERGED, Status.FAILED, Status.TIMEOUT]
    runs = [
        TrialOutcome("new", "gpt", "lm", seed, status, {"val_loss": 1.0}, key=f"new{seed}")
        for seed, status in enumerate(statuses)
    ]
    runs += outcomes("base", [1.0, 1.1, 1.2, 1.3])
    ranking = rank(runs, "val_loss", "base")
    (row,) = [row for row in ranking.rows if row.method == "new"]
    # the crash and the timeout are excluded (never a loss), the diverged seed fails
    assert (row.seeds.n, row.seeds.n_done, row.seeds.n_failed, row.seeds.n_excluded) == (2, 1, 1, 2)
    frame = rows_frame(ranking, {}).set_index("method")
    assert frame.loc["new", "seeds failed"] == row.seeds.n_failed == frame.loc["new", "failed"]
    assert frame.loc["new", "excluded"] == 2 and frame.loc["new", "n"] == 2
    assert frame.loc["new", "diverged"] == 1 and frame.loc["base", "failed"] == 0
    (summary,) = [s for s in summary_frame(ranking, {}).to_dict("records") if s["method"] == "new"]
    assert summary["failed"] == 1


def load_docs_script(name: str) -> ModuleType:
    """A script of docs/results/ (they are run by path, not imported as a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / f"docs/results/{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_sweep_tables_bold_the_best_by_the_metrics_direction() -> None:
    url = os.environ["LAYERBENCH_DB"]
    upgrade(make_engine(url))
    trials = planned("docs", {"m": {}}, ["gpt"], ["t"], [0])
    rng = np.random.default_rng(0)
    results = []
    for lr, acc in ((0.1, 0.2), (0.2, 0.9)):
        for trial in trials:
            point = type(trial)(
                **{**trial.__dict__, "key": f"{trial.key}{lr}", "sweep": {"lr": lr}}
            )
            results.append((point, fake_result("done", 1.0, rng, {"id_acc": acc})))
    store(make_engine(url), results)
    docs = load_docs_script("tables")
    text = docs.table_md(docs.sweep_table(url, "docs", "id_acc", "lr"))
    assert "0.2: **0.9**" in text and "0.1: 0.2" in text


def test_docs_layer_tables_average_each_block_over_seeds_at_the_last_step() -> None:
    from harness.records import LayerStat

    url = os.environ["LAYERBENCH_DB"]
    upgrade(make_engine(url))
    rng = np.random.default_rng(0)
    results = []
    for trial in planned("layers", {"post": {}}, ["gpt"], ["t"], [0, 1]):
        result = fake_result("done", 1.0, rng)
        result.layer_stats = [
            LayerStat(step, layer, "grad_norm", (trial.seed + 1) * 10.0**-layer * step)
            for step in (50, 100)
            for layer in (0, 1)
        ]
        results.append((trial, result))
    store(make_engine(url), results)
    docs = load_docs_script("tables")
    table = docs.layer_table(url, "layers", "grad_norm", "t", "gpt", ["post", "absent"])
    assert table.header == ["method", "block 0", "block 1"]
    (row,) = table.sections[0].rows  # a method with no trials has no row
    assert [cell.value for cell in row] == ["post", 150.0, 15.0]  # step 100, seeds 1x and 2x


def test_overall_order_follows_rank_aggregate() -> None:
    runs = outcomes("base", [2.0, 2.0]) + outcomes("a", [1.0, 1.0]) + outcomes("b", [1.5, 1.5])
    runs += outcomes("base", [1.0, 1.0], "t2") + outcomes("a", [3.0, 3.0], "t2")
    runs += outcomes("b", [0.9, 0.9], "t2")
    normalized = rank(runs, RankSpec(metric="val_loss", aggregate="normalized"), "base")
    ratios = {s.method: s.normalized for s in normalized.summary}
    assert ratios == pytest.approx({"base": 1.0, "a": (0.5 + 3.0) / 2, "b": (0.75 + 0.9) / 2})
    assert [s.method for s in normalized.summary] == ["b", "base", "a"]
    by_rank = rank(runs, RankSpec(metric="val_loss", aggregate="mean_rank"), "base")
    assert by_rank.summary[0].method == "b"
    assert "Overall (by mean / baseline)" in format_ranking(normalized, "md")


def test_wilson_interval_and_exact_mcnemar_on_constructed_outcomes() -> None:
    correct = np.array([[1.0] * 7 + [0.0] * 3])
    low, high = wilson_ci(correct)
    z = stats.norm.ppf(0.975)
    centre = (0.7 + z**2 / 20) / (1 + z**2 / 10)
    half = z / (1 + z**2 / 10) * np.sqrt(0.7 * 0.3 / 10 + z**2 / 400)
    assert (low[0], high[0]) == pytest.approx((centre - half, centre + half))
    # 10 examples both get right, 8 only a gets right, 1 only b: p = binomtest(8, 9)
    a = np.array([1.0] * 10 + [1.0] * 8 + [0.0] * 1 + [0.0] * 5)
    b = np.array([1.0] * 10 + [0.0] * 8 + [1.0] * 1 + [0.0] * 5)
    p, diff = mcnemar_test(a, b)
    assert p[0] == pytest.approx(stats.binomtest(8, 9, 0.5).pvalue)
    assert diff[0] == pytest.approx(7 / 24)
    assert mcnemar_test(a, a)[0][0] == 1.0


def test_single_seed_groups_with_example_outcomes_get_example_level_statistics() -> None:
    n = 60
    base = np.array([1.0] * 30 + [0.0] * 30)
    good = base.copy()
    good[30:50] = 1.0  # right on 20 examples the baseline misses, wrong on none it gets
    same = base.copy()
    same[[0, 30]] = same[[30, 0]]
    trials = {
        m: TrialOutcome(m, "smollm", "snarks", 0, "done", {"acc": float(v.mean())}, key=m)
        for m, v in {"base": base, "good": good, "same": same}.items()
    }
    examples = {
        m: {"acc": {f"ex{i}": float(x) for i, x in enumerate(v)}}
        for m, v in {"base": base, "good": good, "same": same}.items()
    }
    ranking = rank(trials.values(), "acc", "base", examples=examples)
    rows = {row.method: row for row in ranking.rows}
    assert all(row.unit == "examples" for row in rows.values())
    assert (rows["good"].versus.verdict, rows["same"].versus.verdict) == ("better", "n.s.")
    raw = [stats.binomtest(20, 20).pvalue, stats.binomtest(1, 2).pvalue]
    adjusted = np.minimum(1, np.maximum.accumulate(np.array(sorted(raw)) * [2, 1]))
    assert rows["good"].versus.p_value == pytest.approx(adjusted[0])
    low, high = wilson_ci(good[None, :])
    assert (rows["good"].seeds.ci_low, rows["good"].seeds.ci_high) == pytest.approx(
        (low[0], high[0])
    )
    assert rows["good"].seeds.n == 1 and rows["good"].seeds.mean == pytest.approx(50 / n)
    assert "snarks / smollm (over examples: Wilson CI and exact McNemar" in format_ranking(
        ranking, "md"
    )
    # bits per byte per window: bootstrap intervals and paired t over windows
    rng = np.random.default_rng(0)
    windows = rng.normal(1.0, 0.1, 40)
    shifted = windows + 0.05 + rng.normal(0, 0.01, 40)
    bpb = {
        m: TrialOutcome(m, "smollm", "wiki", 0, "done", {"bits_per_byte": float(v.mean())}, key=m)
        for m, v in {"base": windows, "worse": shifted}.items()
    }
    per_window = {
        "base": {"bits_per_byte": {f"w{i}": x for i, x in enumerate(windows)}},
        "worse": {"bits_per_byte": {f"w{i}": x for i, x in enumerate(shifted)}},
    }
    bits = rank(bpb.values(), "bits_per_byte", "base", examples=per_window)
    worse = next(row for row in bits.rows if row.method == "worse")
    assert (worse.unit, worse.versus.verdict) == ("examples", "worse")
    assert worse.versus.p_value == pytest.approx(stats.ttest_rel(shifted, windows).pvalue)
    assert (
        worse.seeds.ci_low is not None
        and worse.seeds.ci_low < worse.seeds.mean < worse.seeds.ci_high
    )
    assert "(over examples: " in group_table(bits).sections[0].title
    # with the bytes of each window, bits per byte is the byte-weighted mean, as the trial's
    assert weight_name("bits_per_byte") == task_weight_name("bits_per_byte")
    nbytes = rng.integers(100, 1000, 40).astype(float)
    for name in per_window:
        per_window[name]["bits_per_byte:weight"] = {f"w{i}": b for i, b in enumerate(nbytes)}
    weighted = rank(bpb.values(), "bits_per_byte", "base", examples=per_window)
    base = next(row for row in weighted.rows if row.method == "base")
    assert base.seeds.mean == pytest.approx(np.average(windows, weights=nbytes))
    assert base.seeds.ci_low < base.seeds.mean < base.seeds.ci_high  # type: ignore[operator]


def test_residual_probe_retrains_a_stored_trial_and_splits_its_stream(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'probe.db'}"
    upgrade(make_engine(url))
    suite = load_suite(write_suite(tmp_path, "pre-ln: {}\ndyt: {norm: {type: dyt}}"))
    rng = np.random.default_rng(0)
    store(make_engine(url), [(t, fake_result("done", 1.0, rng)) for t in plan_suite(suite)])
    probe = load_docs_script("residual_probe")
    config = probe.stored_config(url, "tiny", "dyt", "gpt-2l", 0)
    probe.apply_settings(config, ["optimizer.lr=1e-3"])
    assert config["optimizer"]["lr"] == 1e-3 and config["norm"]["type"] == "dyt"
    trial = build(prepare(config))
    probe.freeze_norm_biases(trial)
    biases = [p for n, p in trial.model.named_parameters() if "norm" in n and n.endswith("bias")]
    assert biases and all(not p.requires_grad and not p.any() for p in biases)
    probe.probe(trial, steps=4, every=2)
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines()[2:]]
    assert [int(row[0]) for row in rows] == [2, 4]
    for row in rows:
        rms, token_mean_rms, cosine = float(row[4]), float(row[5]), float(row[6])
        assert 0 < token_mean_rms <= rms  # the token mean is a part of the stream
        assert -1 <= cosine <= 1 and float(row[3]) > 0  # block 0 has a gradient
    assert not any(p.requires_grad or p.any() for p in biases)  # still frozen after training
