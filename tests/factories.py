"""What the tests build: the repository root, tiny suite files, tiny models (the harness's GPT,
a Llama and its tokenizer), ranking outcomes, stored trials that look like real ones (written with
the runner's own row builders, so a database holds exactly what a real run would store), and ways
to run `layerbench` in this process or in a fresh one. Plain functions, imported
(`from tests.factories import ...`); conftest.py offers some as fixtures. The benchmarks build
their fake databases with the same functions."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from click.testing import Result as CliResult
from sqlalchemy import Connection, Engine, create_engine, func, insert, select
from sqlalchemy.orm import Session
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from typer.testing import CliRunner

from harness.cli import app
from harness.core import TrialOutcome
from harness.models.gpt import GPT, GPTSpec, build_gpt
from harness.records import LayerStat, PlannedTrial, SeriesPoint, Status, TrialResult
from harness.spec.declaration import RankingDeclaration
from harness.spec.recipe import model_norm
from harness.spec.sections import NormSpec
from harness.store.db import finished, finite, result_rows, suite_run
from harness.store.models import LayerStatistic, MetricPoint, Result, Trial
from harness.trial_metrics import MEASURED_METRICS

ROOT = Path(__file__).resolve().parents[1]
PG_ADMIN_URL = os.environ.get(
    "LAYERBENCH_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)

# Suite files

TINY_SUITE = """\
suite: tiny
seeds: [0, 1]
defaults:
  time_limit_s: 120
  train:
    {{steps: {steps}, batch_size: 8, warmup_steps: 2, eval_every: {eval_every}, eval_batches: 2}}
  optimizer: {{name: adamw, lr: 3.0e-3}}
models:
  gpt-2l: {{type: gpt, {model}, n_heads: 2, max_seq_len: 64}}
tasks:
  bytes: {{type: lm, corpus: shakespeare, tokenizer: byte, seq_len: 32}}
methods:
{methods}
baseline: pre-ln
"""


def write_suite(
    directory: Path,
    methods: str,
    steps: int = 20,
    eval_every: int = 10,
    extra: str = "",
    model: str = "n_layers: 2, d_model: 32",
) -> Path:
    """A tiny suite file; `methods` is the YAML body of the `methods` section, `model` the
    shape of its one gpt (2 layers of width 32 unless it says otherwise)."""
    path = directory / "suite.yaml"
    body = TINY_SUITE.format(
        steps=steps,
        eval_every=eval_every,
        methods=textwrap.indent(methods.strip(), "  "),
        model=model,
    )
    path.write_text(body + extra)
    return path


# Models

GPT_SIZE = {"n_layers": 2, "d_model": 32, "n_heads": 4, "max_seq_len": 32}


def tiny_gpt(norm: NormSpec | None = None, vocab_size: int = 37, **spec: Any) -> GPT:
    """The harness's GPT, seeded (`torch.manual_seed(0)`): 2 layers of width 32 unless `spec`
    says otherwise; in training mode, as `build_gpt` returns it."""
    torch.manual_seed(0)
    return build_gpt(GPTSpec(**{**GPT_SIZE, **spec}), model_norm(norm or NormSpec()), vocab_size)


def byte_bpe_tokenizer(texts: list[str], vocab_size: int = 400) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained here on `texts` (nothing is downloaded)."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<eos>", pad_token="<eos>")


def tiny_llama(vocab_size: int, n_layers: int) -> LlamaForCausalLM:
    """A randomly initialised Llama small enough for a unit test."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=n_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=0,
        pad_token_id=0,
        bos_token_id=0,
    )
    return LlamaForCausalLM(config).eval()


def scipy_percentile_ci(values: list[float]) -> tuple[float, float]:
    """The 95% percentile-bootstrap CI of the mean as scipy computes it (ranking's reference)."""
    from scipy import stats

    interval = stats.bootstrap(
        (np.array(values),),
        np.mean,
        method="percentile",
        n_resamples=2000,
        rng=np.random.default_rng(0),
    ).confidence_interval
    return interval.low, interval.high


# Ranking outcomes


def outcomes(
    method: str,
    values: Sequence[float | None],
    metric: str = "val_loss",
    task: str = "lm",
    model: str = "gpt",
    keyed: bool = False,
) -> list[TrialOutcome]:
    """One outcome per seed (seed = position); None marks a diverged seed. `keyed` gives each
    trial the key method + seed."""
    return [
        TrialOutcome(method, model, task, seed, "diverged", {})
        if value is None
        else TrialOutcome(
            method,
            model,
            task,
            seed,
            "done",
            {metric: value},
            key=f"{method}{seed}" if keyed else "",
        )
        for seed, value in enumerate(values)
    ]


# Stored trials (fake results)

EVALS = 4
EVAL_EVERY = 50
LAYERS = 4
START_LOSS = 5.5
TRACEBACK = 'Traceback (most recent call last):\n  File "trial.py"\nRuntimeError: {}'


@dataclass(frozen=True)
class StubRecipe:
    """Stands in for a `TrialRecipe` where a test stores and ranks made-up trials: only their
    stored `config` is read, and the name of their task type (none: no metric is declared)."""

    config: dict[str, Any]
    task_entry = SimpleNamespace(name="")
    evaluation = None  # no lm-eval task of a fine-tuning method's `evaluate`


def planned(
    suite: str,
    methods: Mapping[str, Mapping[str, Any]],
    models: Iterable[str],
    tasks: Iterable[str],
    seeds: Iterable[int],
    version: str = "",
) -> list[PlannedTrial]:
    """Trials of every (method, model, task, seed); `methods` maps a name to its settings.

    Keys hash the trial and `version`, as real keys hash the versions that change results.
    """
    trials = []
    for method, settings in methods.items():
        for model in models:
            for task in tasks:
                for seed in seeds:
                    config = {**settings, "model": {"name": model}, "task": {"name": task}}
                    label = f"{suite}/{method}/{model}/{task}/{seed}/{version}"
                    key = hashlib.sha256(label.encode()).hexdigest()
                    recipe = StubRecipe({**config, "seed": seed})
                    trials.append(PlannedTrial(key, suite, method, model, task, seed, {}, recipe))
    return trials


def fake_result(
    status: Status,
    final_loss: float,
    rng: np.random.Generator,
    extra: Mapping[str, float] | None = None,
) -> TrialResult:
    """A trial result: a decaying loss curve ending near `final_loss`, and layer statistics."""
    if status in ("failed", "timeout"):
        return TrialResult(status, error=TRACEBACK.format(f"fake {status}"), wall_time_s=1.0)
    steps = [EVAL_EVERY * (i + 1) for i in range(EVALS)]
    series = [_point(step, final_loss, rng) for step in steps]
    if status == "diverged":
        series[-1] = _point(steps[-1], math.nan, rng)
        return TrialResult(status, series=series, failed_step=steps[-1], steps_done=steps[-1])
    final = {"val_loss": final_loss, "train_loss": final_loss - 0.05, **(extra or {})}
    stats = [
        LayerStat(step, layer, name, float(rng.lognormal(mean=-layer / 4, sigma=0.2)))
        for step in steps
        for layer in range(LAYERS)
        for name in ("grad_norm", "hidden_rms")
    ]
    return TrialResult(
        status,
        final=final,
        series=series,
        layer_stats=stats,
        steps_done=steps[-1],
        train_time_s=series[-1].train_time_s,
        wall_time_s=series[-1].wall_time_s,
        environment={"torch_version": "2.13.0", "device": "cpu"},
    )


def _point(step: int, final_loss: float, rng: np.random.Generator) -> SeriesPoint:
    decay = math.exp(-step / EVAL_EVERY)
    loss = final_loss + (START_LOSS - final_loss) * decay + float(rng.normal(0, 0.01))
    train_time = step * float(rng.uniform(0.04, 0.06))
    return SeriesPoint(
        step, step * 1024, train_time, train_time * 1.2, {"val_loss": loss, "train_loss": loss}
    )


def store(
    engine: Engine, results: Iterable[tuple[PlannedTrial, TrialResult]], cadence: str = "manual"
) -> int:
    """Store the trials and their results under a new suite run; returns the run's id."""
    results = list(results)
    suite = results[0][0].suite
    keys = [trial.key for trial, _ in results]
    with suite_run(engine, suite, cadence, len(results), None, keys) as run:
        with Session(engine) as session, session.begin():
            rows = [_trial_row(trial, result, run.id) for trial, result in results]
            session.add_all(rows)
            session.flush()
            for row, (_, result) in zip(rows, results, strict=True):
                session.add_all(result_rows(row.id, result))
        run.n_ran = len(results)
    return run.id


def _trial_row(trial: PlannedTrial, result: TrialResult, suite_run_id: int) -> Trial:
    return Trial(
        key=trial.key,
        suite=trial.suite,
        method=trial.method,
        model=trial.model,
        task=trial.task,
        seed=trial.seed,
        sweep=trial.sweep,
        config=trial.config,
        attempts=1,
        suite_run_id=suite_run_id,
        **finished(result),
    )


BULK_ROWS = 50_000


def store_bulk(
    engine: Engine,
    results: Iterable[tuple[PlannedTrial, TrialResult]],
    ranking: RankingDeclaration | None = None,
    cadence: str = "manual",
) -> int:
    """`store` for hundreds of thousands of trials: the same columns and values, written with
    SQLAlchemy core `executemany` inserts in batches instead of ORM objects (about 10x faster).
    Trial ids are assigned here, so the child rows need no round trip. `ranking` is what the
    suite run records as the suite's baseline and `rank` section."""
    results = list(results)
    suite = results[0][0].suite
    keys = [trial.key for trial, _ in results]
    with suite_run(engine, suite, cadence, len(results), ranking, keys) as run:
        with engine.begin() as connection:
            first = (connection.scalar(select(func.max(Trial.id))) or 0) + 1
            trials = [
                {"id": first + i, **_trial_columns(trial, result, run.id)}
                for i, (trial, result) in enumerate(results)
            ]
            _insert(connection, Trial, trials)
            children: dict[type, list[dict[str, Any]]] = {}
            for trial_id, (_, result) in enumerate(results, start=first):
                for model, columns in _child_rows(trial_id, result):
                    children.setdefault(model, []).append(columns)
            for model, rows in children.items():
                _insert(connection, model, rows)
        run.n_ran = len(results)
    return run.id


def _insert(connection: Connection, model: type, rows: list[dict[str, Any]]) -> None:
    for start in range(0, len(rows), BULK_ROWS):
        connection.execute(insert(model), rows[start : start + BULK_ROWS])


def _child_rows(trial_id: int, result: TrialResult) -> Iterator[tuple[type, dict[str, Any]]]:
    """The columns of `harness.store.db.result_rows` as dicts (no ORM objects)."""
    for point in result.series:
        for name, value in point.metrics.items():
            yield (
                MetricPoint,
                {
                    "trial_id": trial_id,
                    "name": name,
                    "step": point.step,
                    "tokens": point.tokens,
                    "train_time_s": point.train_time_s,
                    "wall_time_s": point.wall_time_s,
                    "value": finite(value),
                },
            )
    for name, value in result.final.items():
        yield Result, {"trial_id": trial_id, "name": name, "value": finite(value)}
    for stat in result.layer_stats:
        yield (
            LayerStatistic,
            {
                "trial_id": trial_id,
                "step": stat.step,
                "layer": stat.layer,
                "name": stat.name,
                "value": finite(stat.value),
            },
        )


def _trial_columns(trial: PlannedTrial, result: TrialResult, suite_run_id: int) -> dict[str, Any]:
    return {
        "key": trial.key,
        "suite": trial.suite,
        "method": trial.method,
        "model": trial.model,
        "task": trial.task,
        "seed": trial.seed,
        "sweep": trial.sweep,
        "config": trial.config,
        "attempts": 1,
        "suite_run_id": suite_run_id,
        "tokens": 0,
        "heartbeat_at": None,
        "started_at": None,
        "mlflow_run_id": None,
        **finished(result),
    }


# Running trials


class MemoryLedger:
    """A ledger that lets this runner claim every trial and keeps the results."""

    def __init__(self) -> None:
        self.results: dict[str, TrialResult] = {}

    def claim(self, trial: PlannedTrial) -> bool:
        return True

    def heartbeat(self, trial: PlannedTrial) -> None:
        pass

    def finish(self, trial: PlannedTrial, result: TrialResult) -> None:
        self.results[trial.key] = result

    def release(self, trial: PlannedTrial) -> None:
        pass


def stored(result: TrialResult) -> tuple[object, ...]:
    """What the store keeps of a trial, less its timings and environment."""
    return (
        result.status,
        result.final | dict.fromkeys(MEASURED_METRICS),
        [(p.step, p.tokens, p.metrics) for p in result.series],
        result.layer_stats,
        result.steps_done,
        result.tokens,
    )


# Running `layerbench`


def invoke(*args: str) -> CliResult:
    """`layerbench ARGS` in this process; its stdout is a pipe, not a terminal. An exception other
    than the command's exit fails the test here, with its traceback."""
    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def run_process(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    """`layerbench ARGS` in a fresh process (for kills, concurrency and real exit paths)."""
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=600,
    )


def run_beside(
    remote: Sequence[str], local: Sequence[str]
) -> tuple[subprocess.CompletedProcess[str], CliResult]:
    """`layerbench REMOTE` in a fresh process (a driver of a cluster backend) and, while it runs,
    `layerbench LOCAL` in this one: each waits on its own trials, so they run at once."""
    with ThreadPoolExecutor(1) as pool:
        remote_run = pool.submit(run_process, *remote)
        local_run = invoke(*local)
        return remote_run.result(), local_run


def trials_by_key(url: str) -> dict[str, Trial]:
    """The stored trials of a database, by key."""
    with Session(create_engine(url)) as session:
        return {trial.key: trial for trial in session.scalars(select(Trial))}


def count(url: str, table: type, trial_id: int) -> int:
    """The rows of `table` that belong to a trial."""
    with Session(create_engine(url)) as session:
        return session.scalar(
            select(func.count()).select_from(table).where(table.trial_id == trial_id)
        )


CHOICE_TASK = """\
task: {name}
dataset_path: json
dataset_kwargs:
  data_files: {{validation: "{folder}/validation.jsonl", test: "{folder}/test.jsonl"}}
output_type: multiple_choice
validation_split: validation
test_split: test
doc_to_text: "{{{{input}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{target}}}}"
metric_list:
  - {{metric: acc, aggregation: mean, higher_is_better: true}}
"""


def write_choice_task(folder: Path, name: str, rows: Mapping[str, list[dict[str, Any]]]) -> None:
    """A multiple-choice lm-eval task `name` in `folder` (its `include_path`): the rows of its
    validation (tuning) and test (reporting) splits as JSON lines, and its task file."""
    for split, split_rows in rows.items():
        (folder / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in split_rows))
    (folder / f"{name}.yaml").write_text(CHOICE_TASK.format(name=name, folder=folder))
