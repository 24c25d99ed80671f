"""Per-example outcomes of evaluation-only trials: made by the trial, stored with its result in
one transaction, read back by `example_outcomes` (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Engine, create_engine, inspect, text
from sqlalchemy.orm import Session

from harness.records import PlannedTrial, TrialResult
from harness.runner.trial import run_trial
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from harness.store.db import StoreLedger, alembic_config, open_database, suite_run
from harness.store.queries import example_outcomes
from harness.tasks import bigbench
from harness.tasks.base import weight_name
from tests.factories import StubRecipe, byte_bpe_tokenizer, tiny_llama

SUITE = """\
suite: outcomes
seeds: [0]
defaults: {{train: {{batch_size: 4}}, time_limit_s: 300}}
models:
  tiny: {{type: pretrained, source: "{model}"}}
tasks:
  held-out: {{type: perplexity, corpus: shakespeare, seq_len: 32, windows: 5}}
  hyperbaton: {{type: lm-eval, task: lb_bigbench_hyperbaton, limit: 9}}
methods:
  full: {{}}
baseline: full
"""

EXAMPLES = [
    {"input": f"Example {i}: which one?", "target_scores": {"good": i % 2, "bad": 1 - i % 2}}
    for i in range(12)
]


def store(engine: Engine, planned: PlannedTrial, result: TrialResult) -> None:
    """Claim and finish the trial as the runner does."""
    with suite_run(engine, planned.suite, "manual", 1, ranking=None) as run:
        ledger = StoreLedger(engine, run.id, force=True)
        assert ledger.claim(planned)
        ledger.finish(planned, result)


@pytest.fixture
def planned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[PlannedTrial]:
    """The trials of a tiny pretrained Llama on a perplexity and a BIG-bench lm-eval task."""
    monkeypatch.setenv("LAYERBENCH_CACHE", str(tmp_path / "cache"))
    bigbench.task_file("hyperbaton").parent.mkdir(parents=True)
    bigbench.task_file("hyperbaton").write_text(json.dumps({"examples": EXAMPLES}))
    tokenizer = byte_bpe_tokenizer(["To be, or not to be, that is the question."] * 20, 300)
    tiny_llama(len(tokenizer), n_layers=2).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    (tmp_path / "suite.yaml").write_text(SUITE.format(model=tmp_path / "tiny"))
    return plan_suite(load_suite(tmp_path / "suite.yaml"))


def test_eval_only_trials_store_outcomes_that_make_up_their_metrics(
    planned: list[PlannedTrial], tmp_path: Path
) -> None:
    engine = open_database(f"sqlite:///{tmp_path / 'outcomes.db'}")
    results = {}
    for trial in planned:
        results[trial.task] = run_trial(trial.config)
        assert results[trial.task].status == "done", results[trial.task].error
        store(engine, trial, results[trial.task])
    keys = {trial.task: trial.key for trial in planned}
    with Session(engine) as session:
        outcomes = example_outcomes(session, keys.values())

    accuracy = results["hyperbaton"].final["acc"]
    correct = outcomes[keys["hyperbaton"]]["acc"]
    assert sorted(correct, key=int) == [str(i) for i in range(9)]  # one row per example
    assert set(correct.values()) <= {0.0, 1.0}
    assert sum(correct.values()) / 9 == pytest.approx(accuracy)

    final, windows = results["held-out"].final, outcomes[keys["held-out"]]
    for metric in ("bits_per_byte", "test_bits_per_byte", "val_bits_per_byte"):
        bits, weights = windows[metric], windows[weight_name(metric)]
        assert len(bits) == 5
        combined = sum(bits[w] * weights[w] for w in bits) / sum(weights.values())
        assert combined == pytest.approx(final[metric], rel=1e-9)
    assert final["val_bits_per_byte"] != final["test_bits_per_byte"]
    assert "acc" not in windows


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_outcomes_are_stored_replaced_and_read_per_trial(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'store.db'}"
        if backend == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    engine = open_database(url)
    stub = StubRecipe({})
    trials = [PlannedTrial(f"{i:064x}", "s", "m", "model", "task", 0, {}, stub) for i in range(3)]
    first = {"acc": {"0": 1.0, "1": 0.0}, "gold_loglikelihood": {"0": -1.5, "1": math.inf}}
    store(engine, trials[0], TrialResult("done", final={"acc": 0.5}, examples=first))
    store(engine, trials[1], TrialResult("done", final={"acc": 1.0}, examples={"acc": {"7": 1}}))
    store(engine, trials[2], TrialResult("done", final={"val_loss": 2.0}))  # a training trial
    with Session(engine) as session:
        read = example_outcomes(session, [t.key for t in trials])
    assert set(read) == {trials[0].key, trials[1].key}
    assert read[trials[0].key]["acc"] == {"0": 1.0, "1": 0.0}
    assert math.isnan(read[trials[0].key]["gold_loglikelihood"]["1"])  # stored as NULL
    assert read[trials[1].key] == {"acc": {"7": 1.0}}

    store(engine, trials[0], TrialResult("done", final={"acc": 1.0}, examples={"acc": {"0": 1.0}}))
    with Session(engine) as session:
        assert example_outcomes(session, [trials[0].key]) == {trials[0].key: {"acc": {"0": 1.0}}}


def test_migration_adds_the_outcome_table_and_keeps_results(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    with create_engine(url).begin() as connection:
        command.upgrade(alembic_config(connection), "0002")
        connection.execute(
            text(
                "INSERT INTO trials (key, suite, method, model, task, seed, sweep, config, "
                "status, steps_done, tokens, attempts) VALUES "
                "('k', 's', 'm', 'x', 't', 0, '{}', '{}', 'done', 0, 0, 1)"
            )
        )
        connection.execute(text("INSERT INTO results VALUES (1, 'acc', 0.25)"))
    engine = open_database(url)
    assert "example_outcomes" in inspect(engine).get_table_names()
    with engine.connect() as connection:
        assert connection.execute(text("SELECT name, value FROM results")).one() == ("acc", 0.25)
    with Session(engine) as session:
        assert example_outcomes(session, ["k"]) == {}
