"""The leaderboard app through `streamlit.testing`: its numbers, filters, pages and edge cases."""

from __future__ import annotations

import base64
import io
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import delete, func, insert, select, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from streamlit.testing.v1 import AppTest

from harness.ranking.table import EMPTY
from harness.records import PlannedTrial, TrialResult
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from harness.store.db import make_engine, open_database, upgrade
from harness.store.models import Result, Trial
from leaderboard import data
from leaderboard.export import parquet_bytes, selection_frame
from leaderboard.state import engine as app_engine
from tests.factories import ROOT, fake_result, invoke, planned, store, write_suite

pytestmark = pytest.mark.slow  # real trials, subprocesses or the app

APP = ROOT / "leaderboard" / "app.py"
METHODS = """
pre-ln: {}
post-ln: {norm: {placement: post}}
rms: {norm: {type: rmsnorm}}
lr-sweep: {extends: pre-ln, sweep: {optimizer.lr: [1.0e-3, 2.0e-3]}}
"""
LOSS = {"pre-ln": 1.5, "post-ln": 1.6, "rms": 1.4, "lr-sweep": 1.45}
MARKS = {"better": "▲ better", "worse": "▼ worse", "n.s.": "n.s.", "baseline": "baseline"}


def tiny_result(trial: PlannedTrial) -> TrialResult:
    """post-ln diverges on seed 1, one lr-sweep point fails; rms is the best method."""
    rng = np.random.default_rng(int(trial.key[:8], 16))
    if trial.method == "post-ln" and trial.seed == 1:
        return fake_result("diverged", math.nan, rng)
    if trial.sweep.get("optimizer.lr") == 1.0e-3:
        return fake_result("failed", math.nan, rng)
    loss = LOSS[trial.method] + 0.01 * trial.seed + float(rng.normal(0, 0.003))
    bits = {"rms": 4.0, "lr-sweep": 8.0}.get(trial.method, 16.0)
    return fake_result("done", loss, rng, {"effective_bits": bits})


def store_tiny_suite(directory: Path, url: str) -> Path:
    """The tiny suite's planned trials, stored with fake results; returns the suite file."""
    suite = write_suite(directory, METHODS)
    database = make_engine(url)
    upgrade(database)
    store(database, [(trial, tiny_result(trial)) for trial in plan_suite(load_suite(suite))])
    return suite


@pytest.fixture
def tiny_suite_db(tmp_path: Path) -> Path:
    return store_tiny_suite(tmp_path, os.environ["LAYERBENCH_DB"])


def run_app(page: str | None = None, **query: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params.update(query)
    at.run()
    if page is not None:
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def optional(value: Any) -> Any:
    """An empty value as None: NaN, +inf (the board's stand-in for an empty number, shown as
    an en dash) or the en dash of an empty text."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return None if value == EMPTY else value


def records(frame: pd.DataFrame, columns: list[str]) -> list[list[Any]]:
    return [[optional(v) for v in row] for row in frame[columns].itertuples(index=False)]


def test_ranked_table_equals_layerbench_rank_json(tiny_suite_db: Path) -> None:
    ranked = invoke("rank", str(tiny_suite_db), "--format", "json")
    assert ranked.exit_code == 0, ranked.output
    expected = json.loads(ranked.stdout)
    groups, overall = expected["tables"]
    at = run_app()
    summary, rows = (frame.value for frame in at.dataframe)
    assert f"baseline: {expected['baseline']}" in at.caption[0].value
    assert "95% CI: t-interval" in at.caption[0].value

    def cell_values(table: dict[str, Any], with_keys: bool) -> list[list[Any]]:
        return [
            ([section["keys"]["task"], section["keys"]["model"]] if with_keys else [])
            + [cell["value"] for cell in row]
            for section in table["sections"]
            for row in section["rows"]
        ]

    shown = records(rows, ["task", "model", *groups["header"]])
    for line in shown:
        line[2 + groups["header"].index("verdict")] = next(
            k for k, v in MARKS.items() if v == line[2 + groups["header"].index("verdict")]
        )
    assert shown == cell_values(groups, with_keys=True)
    assert records(summary, overall["header"]) == cell_values(overall, with_keys=False)
    assert [r["method"] for r in expected["rows"]] == list(rows["method"])
    post_ln = rows[rows["method"] == "post-ln"].iloc[0]
    # a diverged seed fails (loses); none is excluded (crashed or timed out)
    assert (post_ln["diverged"], post_ln["failed"], post_ln["seeds failed"]) == (1, 1, 1)
    assert post_ln["excluded"] == 0


def test_filters_change_the_table(tiny_suite_db: Path) -> None:
    at = run_app()
    rows = at.dataframe[1].value
    families = dict(zip(rows["method"], rows["family"], strict=True))
    assert families == {
        "pre-ln": "baseline",
        "post-ln": "normalization",
        "rms": "normalization",
        "lr-sweep": "optimizer",
    }

    at.multiselect(key="families:tiny:pre-ln").set_value(["baseline", "normalization"]).run()
    assert set(at.dataframe[1].value["method"]) == {"pre-ln", "post-ln", "rms"}
    assert set(at.dataframe[0].value["method"]) == {"pre-ln", "post-ln", "rms"}

    at.selectbox(key="metric:tiny").set_value("train_loss").run()
    by_train_loss = at.dataframe[1].value.set_index("method")["mean"]
    by_val_loss = rows.set_index("method")["mean"]
    for method in ("pre-ln", "rms"):  # the fake train loss is the val loss - 0.05
        assert by_train_loss[method] == pytest.approx(by_val_loss[method] - 0.05)
    assert "train_loss (lower is better" in at.caption[0].value

    at.selectbox(key="baseline:tiny").set_value("rms").run()
    verdicts = at.dataframe[1].value.set_index("method")["verdict"]
    assert verdicts["rms"] == "baseline" and verdicts["pre-ln"] != "baseline"


def test_empty_databases_show_a_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "missing.db"
    monkeypatch.setenv("LAYERBENCH_DB", f"sqlite:///{missing}")
    at = run_app()
    assert "no such file" in at.error[0].value and not at.dataframe
    assert not missing.exists()

    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    upgrade(make_engine(empty))
    monkeypatch.setenv("LAYERBENCH_DB", empty)
    at = run_app()
    assert at.info[0].value.startswith("No results in") and not at.dataframe


def test_a_suite_with_only_failed_trials_says_so_on_every_page(tmp_path: Path) -> None:
    database = make_engine(os.environ["LAYERBENCH_DB"])
    upgrade(database)
    rng = np.random.default_rng(0)
    trials = planned("broken", {"a": {}, "b": {"norm": {"type": "x"}}}, ["m"], ["t"], [0, 1])
    statuses = ["failed", "timeout", "failed", "diverged"]
    store(
        database,
        [(t, fake_result(s, math.nan, rng)) for t, s in zip(trials, statuses, strict=True)],
    )
    at = run_app()
    assert at.warning[0].value.startswith(
        "No trial in this selection has a value of val_loss: 3 failed or timed out, 1 diverged"
    )
    rows = at.dataframe[1].value
    assert all(optional(v) is None for v in rows["mean"])  # shown as an en dash
    # b's diverged seed fails; the crashes and the timeout are excluded, never counted as losses
    assert sorted(zip(rows["method"], rows["seeds failed"], rows["excluded"], strict=True)) == [
        ("a", 0, 2),
        ("b", 1, 1),
    ]
    assert run_app("compare").info[-1].value.startswith("Pareto plots need")
    assert "RuntimeError: fake failed" in run_app("trial").code[0].value
    assert run_app("history").info[0].value.startswith("No nightly run of this suite")


def plotted(values: Any) -> list[float]:
    """Plotly's JSON of an array: a list, or a base64-encoded typed array."""
    if isinstance(values, dict):
        return np.frombuffer(base64.b64decode(values["bdata"]), values["dtype"]).tolist()
    return list(values)


def test_compare_page_plots_curves_heatmaps_and_the_pareto_front(tiny_suite_db: Path) -> None:
    at = run_app("compare")
    charts = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    curves, heatmaps, profiles, fronts = charts[:2], charts[2:6], charts[6:-1], charts[-1:]
    names = {trace.get("name") for trace in curves[0]["data"]} - {None}
    assert names == {"pre-ln", "post-ln", "rms", "lr-sweep"}
    assert [c["layout"]["xaxis"]["title"]["text"] for c in curves] == ["step", "train time (s)"]
    assert all(h["data"][0]["type"] == "heatmap" for h in heatmaps)
    # across models: a line per model and method along relative depth, the last step of each
    assert [p["layout"]["title"]["text"] for p in profiles] == ["hidden_rms"]
    assert profiles[0]["layout"]["xaxis"]["title"]["text"] == "relative depth"
    lines = {trace["name"] for trace in profiles[0]["data"]}
    assert lines == {f"gpt-2l / {method}" for method in ("pre-ln", "post-ln", "rms", "lr-sweep")}
    front = next(t for t in fronts[0]["data"] if t["name"] == "Pareto front")
    assert plotted(front["x"]) == [4.0]  # rms: the fewest bits and the lowest loss


def test_trial_page_shows_a_trial_and_links_its_mlflow_run(
    tiny_suite_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = make_engine(os.environ["LAYERBENCH_DB"])
    with Session(database) as session:
        key = session.scalars(
            select(Trial.key).where(Trial.method == "post-ln", Trial.seed == 1)
        ).one()
    with database.begin() as connection:
        connection.execute(update(Trial).where(Trial.key == key).values(mlflow_run_id="abc123"))
    monkeypatch.setenv("LAYERBENCH_MLFLOW_URL", "http://mlflow.test:5000/")
    at = run_app("trial", key=key)
    assert at.subheader[0].value == "post-ln / gpt-2l / bytes / seed 1"
    assert any("Status: **diverged** at step 200" in m.value for m in at.markdown)
    assert at.link_button[0].proto.url == "http://mlflow.test:5000/#/runs/abc123"
    command = at.code[-1]
    assert command.value == (
        "layerbench run SUITE.yaml --only method=post-ln,model=gpt-2l,task=bytes,seed=1 --force "
        f"--db {os.environ['LAYERBENCH_DB']}"
    )


def test_trial_page_plots_val_loss_when_the_ranked_metric_has_no_series(
    tiny_suite_db: Path,
) -> None:
    at = run_app("trial")
    at.selectbox(key="metric:tiny").set_value("effective_bits").run()
    assert not at.exception, [e.message for e in at.exception]
    captions = [caption.value for caption in at.caption]
    assert r"No effective\_bits series is stored for this trial: showing val\_loss." in captions
    chart, *layer_profiles = at.get("plotly_chart")  # the learning curve, then layer profiles
    assert "val_loss" in chart.proto.spec
    titles = [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in layer_profiles]
    assert titles == ["hidden_rms"]  # of the stored statistics, the one profiles show first


def test_history_marks_nightly_alerts_on_the_curve_and_filters_regressions(
    tmp_path: Path,
) -> None:
    from tests.test_nightly import SUITE, nightly_history

    suite = tmp_path / "nightly.yaml"
    suite.write_text(SUITE)
    nights = nightly_history(open_database(), suite)
    at = run_app("history")
    assert at.selectbox(key="run:tiny").value == nights[-1].run.id  # the latest nightly run
    (chart,) = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    traces = {t.get("name"): t for t in chart["data"] if t.get("name")}
    assert {"a", "b", "c", "regression", "suspected"} <= set(traces)
    assert traces["suspected"]["marker"]["symbol"] == ["diamond-open"]  # acknowledged
    assert traces["regression"]["marker"]["symbol"] == ["x"]
    assert plotted(traces["regression"]["y"]) == pytest.approx([2.4 + 0.005 / 3])
    alerts = at.dataframe[0].value
    assert list(alerts["kind"]) == ["suspected", "regression"]
    assert list(alerts["acknowledged"]) == [True, False]
    at.checkbox(key="regressions-only").check().run()
    assert list(at.dataframe[0].value["kind"]) == ["regression"]
    (chart,) = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert {t.get("name") for t in chart["data"]} - {None} == {"b", "regression"}


def assert_writes_fail(url: str) -> None:
    """Every kind of write through the app's engine raises and changes nothing."""
    database = app_engine(url)
    with Session(database) as session:
        before = session.scalar(select(func.count()).select_from(Trial))
    writes = [
        insert(Result).values(trial_id=1, name="hacked", value=0.0),
        update(Trial).values(status="done"),
        delete(Result),
        text("CREATE TABLE intruder (id INTEGER)"),
    ]
    for statement in writes:
        with pytest.raises(DBAPIError, match=r"(?i)read.?only"), database.begin() as connection:
            connection.execute(statement)
    with Session(database) as session:
        assert session.scalar(select(func.count()).select_from(Trial)) == before
        assert session.scalar(select(func.count()).where(Result.name == "hacked")) == 0


def test_the_app_cannot_write_to_sqlite(tiny_suite_db: Path) -> None:
    assert_writes_fail(os.environ["LAYERBENCH_DB"])


def test_the_app_cannot_write_to_postgresql(tmp_path: Path, postgres_url: str) -> None:
    store_tiny_suite(tmp_path, postgres_url)
    assert_writes_fail(postgres_url)


def test_raw_export_has_one_row_per_trial_with_config_status_and_metrics(
    tiny_suite_db: Path,
) -> None:
    engine = app_engine(os.environ["LAYERBENCH_DB"])
    trials = data.trials(engine, "tiny")
    frame = selection_frame(engine, trials, data.metric_names(engine, "tiny"))
    assert list(frame["key"]) == list(trials["key"]) and frame["key"].is_unique
    assert {"config.optimizer.lr", "metric.val_loss", "status"} <= set(frame.columns)
    failed = frame[frame["status"] == "failed"]
    assert len(failed) and failed["metric.val_loss"].isna().all()  # a null, not a string
    swept = frame[frame["method"] == "lr-sweep"]
    assert set(swept["config.optimizer.lr"]) == {"0.001", "0.002"}
    back = pd.read_parquet(io.BytesIO(parquet_bytes(frame)))
    pd.testing.assert_frame_equal(back, frame)
    at = run_app()
    labels = [button.proto.label for button in at.get("download_button")]
    assert labels == ["Download CSV", "Download Parquet"]
