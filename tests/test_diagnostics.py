"""Layerwise diagnostics (SPEC 5.7): definitions, the runner's records, SQL and MLflow."""

from __future__ import annotations

import csv
import os
from itertools import pairwise
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session
from torch import Tensor

from harness.diagnostics import StepProbe, hidden_state_stats, peak_activation
from harness.models.gpt import GPT, rope_tables
from harness.records import LayerStat, PlannedTrial, TrialResult
from harness.runner.timing import Clock
from harness.runner.trial import BuiltTrial, build, prepare, train
from harness.spec import load_suite
from harness.spec.declaration import RankingDeclaration
from harness.spec.plan import plan_suite
from harness.spec.sections import NormSpec
from harness.store.db import StoreLedger, open_database, suite_run
from harness.store.models import LayerStatistic
from harness.store.models import Trial as StoredTrial
from harness.tracking import MLflowTracker
from tests.factories import tiny_gpt, write_suite

pytestmark = pytest.mark.slow  # real trials, subprocesses or the app

PER_LAYER = ["grad_norm", "update_ratio", "hidden_rms", "max_abs_activation", "block_influence"]


def small_gpt(placement: str) -> GPT:
    return tiny_gpt(NormSpec(placement=placement), n_layers=3)


def block_outputs(model: GPT, ids: Tensor) -> list[Tensor]:
    """The embedding output and each block's output, running the blocks one by one."""
    with torch.no_grad():
        x = model.embed(ids)
        rope = rope_tables(ids.shape[1], model.config.d_model // model.config.n_heads, x.device)
        outputs = [x]
        for block in model.blocks:
            outputs.append(block(outputs[-1], rope))
    return outputs


def by_name(stats: list[LayerStat], name: str) -> list[float]:
    return [s.value for s in sorted(stats, key=lambda s: s.layer) if s.name == name]


@pytest.mark.parametrize("placement", ["pre", "peri"])
def test_hidden_state_statistics_equal_a_direct_computation(placement: str) -> None:
    model = small_gpt(placement)
    ids = torch.randint(0, 37, (4, 16), generator=torch.Generator().manual_seed(1))
    stats = hidden_state_stats(model, ids, step=7)
    outputs = block_outputs(model, ids)
    pairs = list(pairwise(outputs))
    expected = {
        "hidden_rms": [out.pow(2).mean().sqrt().item() for _, out in pairs],
        "max_abs_activation": [out.abs().max().item() for _, out in pairs],
        "block_influence": [1 - F.cosine_similarity(a, b, dim=-1).mean().item() for a, b in pairs],
    }
    for name, values in expected.items():
        assert by_name(stats, name) == pytest.approx(values, rel=1e-5), name
    assert {s.step for s in stats} == {7}


def test_peak_activation_says_where_the_largest_magnitude_is() -> None:
    outputs = [torch.zeros(2, 4, 5) for _ in range(3)]
    outputs[1][1, 2, 3] = -50.0
    outputs[2][0, 0, 0] = 20.0
    assert peak_activation(outputs, step=3) == [
        LayerStat(3, 1, "peak_activation", 50.0),
        LayerStat(3, 1, "peak_position", 2.0),
        LayerStat(3, 1, "peak_channel", 3.0),
    ]


def test_probe_records_gradient_norms_and_update_ratios_per_block() -> None:
    model, lr = small_gpt("pre"), 0.1
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    ids = torch.randint(0, 37, (2, 12), generator=torch.Generator().manual_seed(2))
    model(ids, labels=ids).loss.backward()
    grads = [torch.cat([p.grad.flatten() for p in b.parameters()]) for b in model.blocks]
    weights = [torch.cat([p.detach().flatten() for p in b.parameters()]) for b in model.blocks]
    probe = StepProbe(model.blocks)
    probe.before_step()
    optimizer.step()
    probe.after_step()
    stats = probe.stats(step=5)
    assert by_name(stats, "grad_norm") == pytest.approx([g.norm().item() for g in grads])
    ratios = [lr * g.norm().item() / w.norm().item() for g, w in zip(grads, weights, strict=True)]
    assert by_name(stats, "update_ratio") == pytest.approx(ratios, rel=1e-4)
    assert probe.seconds > 0


@pytest.fixture(scope="module")
def tiny_trials(tmp_path_factory: pytest.TempPathFactory) -> list[PlannedTrial]:
    suite = write_suite(
        tmp_path_factory.mktemp("suite"), "pre-ln: {}\nperi-ln: {norm: {placement: peri}}"
    )
    return [t for t in plan_suite(load_suite(suite)) if t.seed == 0]


@pytest.fixture(scope="module")
def trained(
    tiny_trials: list[PlannedTrial], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Engine, BuiltTrial, int]]:
    """Each trial trained once for this module, in its own database: method -> (the database,
    the built trial, its stored id)."""
    folder = tmp_path_factory.mktemp("trained")
    found = {}
    for planned in tiny_trials:
        engine = open_database(f"sqlite:///{folder / planned.method}.db")
        found[planned.method] = (engine, *train_and_store(engine, planned))
    return found


def train_and_store(engine: Engine, planned: PlannedTrial) -> tuple[BuiltTrial, int]:
    """Build and train the trial as the runner does, and store its result."""
    trial = build(prepare(planned.config))
    result = TrialResult(status="running")
    train(trial, result, Clock(), lambda step, total, loss: None)
    result.status = "done"
    with suite_run(
        engine, planned.suite, "manual", 1, ranking=RankingDeclaration(baseline="pre-ln")
    ) as run:
        ledger = StoreLedger(engine, run.id)
        assert ledger.claim(planned)
        ledger.finish(planned, result)
    with Session(engine) as session:
        trial_id = session.scalar(select(StoredTrial.id).where(StoredTrial.key == planned.key))
    return trial, trial_id


def stored(engine: Engine, trial_id: int) -> list[LayerStatistic]:
    with Session(engine) as session:
        query = select(LayerStatistic).where(LayerStatistic.trial_id == trial_id)
        return list(session.scalars(query))


def test_pre_and_peri_runs_store_hidden_rms_by_depth_equal_to_a_recomputation(
    trained: dict[str, tuple[Engine, BuiltTrial, int]],
) -> None:
    assert set(trained) == {"pre-ln", "peri-ln"}
    for method, (engine, trial, trial_id) in trained.items():
        rows = stored(engine, trial_id)
        assert {r.step for r in rows} == {10, 20}  # every evaluation, the last one at the end
        for name in PER_LAYER:
            assert sorted(r.layer for r in rows if r.name == name and r.step == 20) == [0, 1]
        assert all(r.value is not None and r.value >= 0 for r in rows)
        final = sorted((r.layer, r.value) for r in rows if r.name == "hidden_rms" and r.step == 20)
        outputs = block_outputs(trial.model, trial.probe_inputs)[1:]
        recomputed = [out.pow(2).mean().sqrt().item() for out in outputs]
        assert [value for _, value in final] == pytest.approx(recomputed, rel=1e-5), method


def test_layer_statistics_reach_mlflow_as_series_and_csv(
    trained: dict[str, tuple[Engine, BuiltTrial, int]], tmp_path: Path
) -> None:
    engine, _, trial_id = trained["pre-ln"]
    tracker = MLflowTracker(engine, os.environ["MLFLOW_TRACKING_URI"])
    run_id = tracker.log_trial(trial_id)
    rows = stored(engine, trial_id)
    history = tracker.client.get_metric_history(run_id, "layer/hidden_rms/1")
    expected = sorted((r.step, r.value) for r in rows if r.name == "hidden_rms" and r.layer == 1)
    assert sorted((m.step, m.value) for m in history) == expected
    path = tracker.client.download_artifacts(run_id, "layer_stats.csv", str(tmp_path))
    with open(path) as handle:
        table = list(csv.DictReader(handle))
    assert len(table) == len(rows)
    assert set(table[0]) == {"step", "layer", "name", "value"}
