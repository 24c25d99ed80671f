"""The typed trial recipe (harness/spec/recipe.py): it serialises to exactly the config every
trial has always stored and hashed into its key, parses back from it, and knows its kind."""

from __future__ import annotations

import json
import pickle
from functools import cache
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from harness.records import PlannedTrial
from harness.registry import EvalTaskEntry, PretrainedModelEntry, TrainTaskEntry
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from harness.spec.recipe import TrialKind, TrialRecipe, model_norm, stored_recipe
from harness.spec.sections import NormSpec
from harness.store.models import Trial
from tests.factories import ROOT

SUITES = sorted([*ROOT.glob("suites/*.yaml"), *ROOT.glob("suites/findings/*.yaml")])
DATABASES = sorted((ROOT / "docs" / "results" / "data").glob("*.db"))


@cache
def planned(path: Path) -> list[PlannedTrial]:
    return plan_suite(load_suite(path))


def as_stored(config: dict[str, object]) -> str:
    """The config as the store writes it (JSON, keys in their order)."""
    return json.dumps(config)


@pytest.mark.parametrize("path", SUITES, ids=lambda path: path.stem)
def test_every_planned_trial_round_trips_through_its_config_byte_for_byte(path: Path) -> None:
    for trial in planned(path):
        parsed = TrialRecipe.from_config(json.loads(as_stored(trial.config)))
        assert as_stored(parsed.config) == as_stored(trial.config), trial.label
        assert parsed == trial.recipe, trial.label


@pytest.mark.parametrize("db", DATABASES, ids=lambda path: path.stem)
def test_every_stored_config_of_the_committed_results_parses_to_itself(db: Path) -> None:
    engine = create_engine(f"sqlite:///file:{db}?mode=ro&uri=true")
    with Session(engine) as session:
        configs = session.scalars(select(Trial.config)).all()
    assert configs
    for config in configs:
        recipe = stored_recipe(config)
        assert recipe is not None and as_stored(recipe.config) == as_stored(config)


def test_the_kind_of_a_train_an_evaluate_and_a_compress_trial() -> None:
    (trained,) = {t.recipe.kind for t in planned(ROOT / "suites" / "quickstart.yaml")}
    assert trained is TrialKind.TRAIN and not trained.pretrained
    compression = {t.method: t.recipe for t in planned(ROOT / "suites" / "compression.yaml")}
    assert compression["full"].kind is TrialKind.EVALUATE
    assert compression["full"].prune is None and compression["full"].quantize is None
    pruned = next(r for r in compression.values() if r.prune is not None)
    assert pruned.kind is TrialKind.COMPRESS and pruned.kind.pretrained
    model, task = pruned.pretrained_entries()
    assert isinstance(model, PretrainedModelEntry) and isinstance(task, EvalTaskEntry)
    with pytest.raises(TypeError, match="a training trial needs"):
        pruned.trained_entries()


def test_a_recipe_holds_what_the_planner_resolved_and_the_config_keeps_its_quirks() -> None:
    trial = planned(ROOT / "suites" / "quickstart.yaml")[0]
    recipe = trial.recipe
    assert recipe.precision == "fp32" and recipe.compile is False  # auto, on the CPU
    assert recipe.threads == 1 and "threads" not in trial.config
    assert "compile" not in trial.config["train"]
    model, task = recipe.trained_entries()
    assert model.name == recipe.config["model"]["type"] and isinstance(task, TrainTaskEntry)
    compiled = TrialRecipe.from_config(
        {**trial.config, "train": {**trial.config["train"], "compile": True}, "threads": 2}
    )
    assert compiled.compile and compiled.threads == 2
    assert compiled.config["train"]["compile"] is True and compiled.config["threads"] == 2


def test_a_recipe_pickles_as_its_config_and_a_worker_reads_cuda_n_as_cuda() -> None:
    recipe = planned(ROOT / "suites" / "quickstart.yaml")[0].recipe
    assert pickle.loads(pickle.dumps(recipe)) == recipe
    on_gpu = TrialRecipe.from_config({**recipe.config, "device": "cuda:1"})
    assert on_gpu.on_worker().device == "cuda" and recipe.on_worker() is recipe


def test_norm_parameters_are_validated_once_and_split_between_placement_and_type() -> None:
    norm = model_norm(NormSpec(placement="mix", type="dyt", post_fraction=0.5))
    assert norm.placement_params["post_fraction"] == 0.5
    assert "post_fraction" not in norm.type_params and "alpha_init" in norm.type_params
    with pytest.raises(ValueError, match="not parameters of placement 'pre'"):
        model_norm(NormSpec(bogus=1))
