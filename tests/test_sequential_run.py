"""`layerbench run` with sequential seeds on tiny suites: a claim decided at the initial seeds
stores no further trial; an undecided one adds seeds only to the two methods it compares."""

from __future__ import annotations

import json
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import Result
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from harness.store.models import Trial
from tests.factories import invoke

pytestmark = pytest.mark.slow  # real trials

SUITE = """\
suite: sequential
seeds: {{initial: 10, max: 20, step: 5}}
defaults:
  time_limit_s: 120
  # enough steps for `trains` to beat the unigram loss: below it a claim is not tested
  train: {{steps: 120, batch_size: 8, warmup_steps: 0, eval_every: 120, eval_batches: 2}}
  optimizer: {{name: adamw, lr: 1.0e-2}}
models:
  gpt-1l: {{type: gpt, n_layers: 1, d_model: 32, n_heads: 2, max_seq_len: 64}}
tasks:
  bytes: {{type: lm, corpus: shakespeare, tokenizer: byte, seq_len: 32}}
methods:
{methods}
baseline: trains
expect:
{claims}
"""


def write(tmp_path: Path, methods: str, claims: str) -> Path:
    path = tmp_path / "suite.yaml"
    path.write_text(
        SUITE.format(
            methods=textwrap.indent(methods.strip(), "  "),
            claims=textwrap.indent(claims.strip(), "  "),
        )
    )
    return path


def layerbench(*args: str) -> Result:
    """`layerbench ARGS` in this process (the trials still fork from the warm fork server)."""
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return result


def stored_seeds(db: str) -> dict[str, set[int]]:
    seeds: dict[str, set[int]] = defaultdict(set)
    with Session(create_engine(db)) as session:
        for trial in session.scalars(select(Trial)):
            seeds[trial.method].add(trial.seed)
    return seeds


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One database for the module's suites: the undecided claim's suite has the decided one's
    trials (same suite, methods and seeds), which it finds stored when it runs second."""
    return f"sqlite:///{tmp_path_factory.mktemp('sequential') / 'sequential.db'}"


def test_a_claim_decided_at_the_initial_seeds_stops_there(tmp_path: Path, db: str) -> None:
    suite = write(
        tmp_path,
        "trains: {}\nfrozen: {optimizer: {lr: 1.0e-7}}",
        "- {method: trains, than: frozen, direction: better, source: test}",
    )
    plan = layerbench("plan", str(suite), "--db", db)
    assert "20 initial trials (seeds 0-9)" in plan.output and "at most 40 trials" in plan.output
    ran = layerbench("run", str(suite), "--db", db, "--no-mlflow")
    assert "20 trials, 0 stored, 20 to run (sequential seeds: at most 40 trials)" in ran.output
    assert "look 1:" in ran.output and "(decided)" in ran.output
    assert stored_seeds(db) == {"trains": set(range(10)), "frozen": set(range(10))}
    ranked = json.loads(layerbench("rank", str(suite), "--db", db, "--format", "json").stdout)
    (check,) = ranked["findings"][0]["checks"]
    assert ranked["findings"][0]["verdict"] == "reproduced"
    record = check["sequential"]
    assert (record["n"], record["looks"], record["stopped"]) == (10, 1, "decided")
    assert record["cpu_s"] > 0 and record["interval"][1] < 0


def test_an_undecided_claim_adds_seeds_only_to_its_two_methods(tmp_path: Path, db: str) -> None:
    # `twin` is `trains` under another name: identical losses, a difference of exactly 0
    suite = write(
        tmp_path,
        "trains: {}\ntwin: {}\nfrozen: {optimizer: {lr: 1.0e-7}}",
        "- {method: trains, than: frozen, direction: better, source: clear}\n"
        "- {method: twin, than: trains, direction: better, source: undecided}",
    )
    ran = layerbench("run", str(suite), "--db", db, "--no-mlflow")
    assert "look 2:" in ran.output
    seeds = stored_seeds(db)
    assert seeds["frozen"] == set(range(10))
    assert seeds["trains"] == seeds["twin"] == set(range(15))  # futile at the second look
    ranked = json.loads(layerbench("rank", str(suite), "--db", db, "--format", "json").stdout)
    clear, undecided = ranked["findings"]
    assert clear["verdict"] == "reproduced"
    assert undecided["verdict"] == "inconclusive"
    assert undecided["checks"][0]["sequential"]["stopped"] == "futile"
