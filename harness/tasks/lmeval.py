"""Evaluation-only tasks of pretrained models (SPEC section 4): `lm-eval` and `perplexity`.

`lm-eval` runs EleutherAI's lm-evaluation-harness (`simple_evaluate` with `HFLM` wrapping the
trial's model object) on an installed task or a local task YAML from `suites/tasks/`.
`perplexity` measures loss, perplexity and bits per byte of a corpus split with the model's
own tokenizer. Calibration data for pruning and quantization is held-out Shakespeare text.

Both report per-example outcomes besides their metrics (`Evaluation.examples`), and keep a
tuning split apart from the reporting one where the data has both: `perplexity` evaluates the
`val` documents (tuning) and the `test` documents (reporting) of its corpus; `lm-eval` reports
the task's test split under lm-eval's metric names and, where the task also has a validation
split, the validation split under the same names prefixed `val_`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.tasks import bigbench
from harness.tasks.base import EvalTask, Evaluation, weight_name
from harness.tasks.catalog import (
    LMEvalTaskSpec,
    PerplexityTaskSpec,
    bigbench_task,
    include_path,
    lm_eval_fingerprint,
    perplexity_fingerprint,
)
from harness.tasks.corpora import ModelTokenizer, Tokenizer, load_corpus, split_documents
from harness.tasks.lm import eval_windows, model_device, perplexity
from harness.tasks.trivial import trivial_name

CALIBRATION_CORPUS = "shakespeare"
SKIP = {"alias", "sample_len"}
TUNING_PREFIX = "val_"


def corpus_split_tokens(
    corpus_name: str,
    split: str,
    tokenizer: ModelTokenizer,
    seed: int = 0,
    fractions: tuple[float, float] = (0.1, 0.1),
) -> Tensor:
    """One document-level split of a corpus (the `lm` task's split), in the model's tokens."""
    documents = split_documents(load_corpus(corpus_name).documents, *fractions, seed)[split]
    return torch.from_numpy(tokenizer.encode("\n".join(text for _, text in documents)))


def shakespeare_calibration(
    tokenizer: ModelTokenizer, n_samples: int, seq_len: int
) -> list[Tensor]:
    """`n_samples` windows of `seq_len` tokens, evenly spaced over the Shakespeare train split.

    Only the windows' text is tokenized (a text span of 8 characters per token is always
    enough for English), not the whole split: calibration costs milliseconds, not seconds.
    """
    documents = load_corpus(CALIBRATION_CORPUS).documents
    train = split_documents(documents, 0.1, 0.1, 0)["train"]
    text = "\n".join(document for _, document in train)
    span = 8 * seq_len
    starts = torch.linspace(0, len(text) - span, n_samples).long().tolist()
    windows = [torch.from_numpy(tokenizer.encode(text[i : i + span])[:seq_len]) for i in starts]
    return list(torch.stack(windows).split(8))


def lm_eval_metrics(results: dict[str, Any], task: str) -> dict[str, float]:
    """`{"acc,none": 0.5, "acc_stderr,none": ...}` -> `{"acc": 0.5, "acc_stderr": ...}`."""
    metrics = {}
    for key, value in results["results"][task].items():
        name, _, _filter = key.partition(",")
        if is_number(value) and name not in SKIP:
            metrics[name] = float(value)
    return metrics


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def sample_outcomes(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """lm-eval's logged samples (`log_samples=True`) as metric -> example id -> value.

    Every numeric per-sample metric lm-eval computed (`acc` and `acc_norm` are 0/1), and for a
    multiple-choice example the log-likelihood of its gold choice (`gold_loglikelihood`, nats).
    Example ids are lm-eval's `doc_id`s, prefixed with the task name for a group's subtasks.
    """
    samples = results.get("samples") or {}
    outcomes: dict[str, dict[str, float]] = defaultdict(dict)
    for task, rows in samples.items():
        for row in rows:
            example = str(row["doc_id"]) if len(samples) == 1 else f"{task}/{row['doc_id']}"
            for name in row["metrics"]:
                if is_number(row[name]):
                    outcomes[name][example] = float(row[name])
            gold = gold_loglikelihood(row)
            if gold is not None:
                outcomes["gold_loglikelihood"][example] = gold
    return dict(outcomes)


def gold_loglikelihood(row: dict[str, Any]) -> float | None:
    """The gold choice's log-likelihood of a multiple-choice sample (one (ll, greedy) a choice)."""
    target, responses = row["target"], row["filtered_resps"]
    if not is_number(target) or not 0 <= int(target) < len(responses):
        return None
    response = responses[int(target)]
    if isinstance(response, tuple | list) and len(response) == 2 and is_number(response[0]):
        return float(response[0])
    return None


def chance_accuracy(results: dict[str, Any]) -> dict[str, float]:
    """The trivial predictor's accuracy (`harness.tasks.trivial`): the mean over the logged
    multiple-choice examples of 1 / their number of choices, under `trivial_name` of `acc` and
    `acc_norm`; empty when no example is multiple-choice."""
    chances = [
        1.0 / len(row["filtered_resps"])
        for rows in (results.get("samples") or {}).values()
        for row in rows
        if gold_loglikelihood(row) is not None
    ]
    if not chances:
        return {}
    level = float(np.mean(chances))
    return {trivial_name("acc"): level, trivial_name("acc_norm"): level}


def prefixed(mapping: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {f"{prefix}{name}": value for name, value in mapping.items()}


class LMEvalTask(EvalTask):
    """An lm-evaluation-harness task, run on the trial's model object (EleutherAI, 2021).

    lm-eval scores a task's test split when it has one, else its validation split
    (`Task.eval_docs`); those metrics keep lm-eval's names. A single task with both splits is
    also run on its validation split, reported as `val_<metric>`: tune on that, report the rest.
    """

    def __init__(self, spec: LMEvalTaskSpec, tokenizer: ModelTokenizer) -> None:
        if (data := bigbench_task(spec)) is not None:
            # a task whose data is not installed fails here, not after lm-eval's imports and
            # its index of every task it knows (seconds)
            bigbench.require(data)
        self.spec = spec
        self.tokenizer = tokenizer

    fingerprint = staticmethod(lm_eval_fingerprint)

    def evaluate(self, model: nn.Module, batch_size: int) -> Evaluation:
        """`lm_eval.simple_evaluate` with `HFLM` around this very model object."""
        from lm_eval.models.huggingface import HFLM

        from harness.models.gpt_hf import as_pretrained

        device = next(model.parameters()).device
        lm = HFLM(
            pretrained=as_pretrained(model),
            tokenizer=self.tokenizer.hf,
            batch_size=batch_size,
            device=str(device),
        )
        manager = task_manager(self.spec.task, include_path(self.spec))
        results = self._run(lm, manager, self.spec.task)
        metrics = lm_eval_metrics(results, self.spec.task) | chance_accuracy(results)
        examples = sample_outcomes(results)
        tuning = validation_task(manager, self.spec.task, results)
        if tuning is not None:
            tuned = self._run(lm, manager, tuning)
            tuned_metrics = lm_eval_metrics(tuned, self.spec.task) | chance_accuracy(tuned)
            metrics |= prefixed(tuned_metrics, TUNING_PREFIX)
            examples |= prefixed(sample_outcomes(tuned), TUNING_PREFIX)
        return Evaluation(metrics, examples)

    def _run(self, lm: Any, manager: Any, task: Any) -> dict[str, Any]:
        """One `simple_evaluate` call, its per-sample log kept (lm-eval's own samples)."""
        from lm_eval import simple_evaluate

        return simple_evaluate(
            model=lm,
            tasks=[task],
            task_manager=manager,
            num_fewshot=self.spec.num_fewshot,
            limit=self.spec.limit,
            log_samples=True,
            bootstrap_iters=0,
        )

    def calibration(self, n_samples: int, seq_len: int) -> list[Tensor]:
        return shakespeare_calibration(self.tokenizer, n_samples, seq_len)


def task_manager(task: str, folder: Path) -> Any:
    """lm-eval's task index for `task`: the task definitions in `folder` alone when `task` is
    one of them; lm-eval's own thousands of tasks are indexed (14 s of CPU here) only for a
    task that is not."""
    from lm_eval.tasks import TaskManager

    local = TaskManager(include_path=str(folder), include_defaults=False)
    return local if task in local.all_tasks else TaskManager(include_path=str(folder))


def validation_task(manager: Any, name: str, results: dict[str, Any]) -> Any | None:
    """The task `name` set to score its validation split, if `results` (lm-eval's run of it)
    show one task with both a validation and a test split (lm-eval scored the test split)."""
    config = results["configs"].get(name)
    if list(results["configs"]) != [name] or not (
        config.get("validation_split") and config.get("test_split")
    ):
        return None
    task = manager.load(name)["tasks"][name]
    task.set_config(key="test_split", value=None)
    return None if task.has_test_docs() else task


class PerplexityTask(EvalTask):
    """Loss, perplexity and bits per byte of a corpus's val and test documents, in the model's
    own tokens: `val_*` (tuning) and `test_*` (reporting); `bits_per_byte` is `split`'s."""

    def __init__(self, spec: PerplexityTaskSpec, tokenizer: ModelTokenizer) -> None:
        self.spec = spec
        self.tokenizer = tokenizer
        fractions = (spec.val_fraction, spec.test_fraction)
        self.tokens = {
            split: corpus_split_tokens(spec.corpus, split, tokenizer, spec.split_seed, fractions)
            for split in ("val", "test")
        }
        for split, tokens in self.tokens.items():
            if len(tokens) <= spec.seq_len:
                raise ValueError(
                    f"the {split} split of corpus '{spec.corpus}' has {len(tokens)} tokens, "
                    f"fewer than seq_len + 1 = {spec.seq_len + 1}"
                )

    fingerprint = staticmethod(perplexity_fingerprint)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, batch_size: int) -> Evaluation:
        """Per split: mean loss over tokens, its perplexity, and total bits over total bytes;
        per window: its loss and bits per byte, its bytes as the weight."""
        metrics: dict[str, float] = {}
        examples: dict[str, dict[str, float]] = {}
        for split, tokens in self.tokens.items():
            windows = eval_windows(tokens, self.spec.seq_len, self.spec.windows)
            nats, n_bytes = window_losses(model, windows, batch_size, self.tokenizer)
            loss = float(nats.sum()) / (windows.shape[0] * (windows.shape[1] - 1))
            bpb = float(nats.sum()) / math.log(2) / float(n_bytes.sum())
            metrics |= {
                f"{split}_loss": loss,
                f"{split}_ppl": perplexity(loss),
                f"{split}_bits_per_byte": bpb,
            }
            ids = [str(i) for i in range(len(windows))]
            per_window = nats / math.log(2) / n_bytes
            examples |= {
                f"{split}_loss": dict(
                    zip(ids, (nats / (windows.shape[1] - 1)).tolist(), strict=True)
                ),
                f"{split}_bits_per_byte": dict(zip(ids, per_window.tolist(), strict=True)),
                weight_name(f"{split}_bits_per_byte"): dict(
                    zip(ids, n_bytes.astype(float).tolist(), strict=True)
                ),
            }
        reported = f"{self.spec.split}_bits_per_byte"
        metrics["bits_per_byte"] = metrics[reported]
        examples["bits_per_byte"] = examples[reported]
        examples[weight_name("bits_per_byte")] = examples[weight_name(reported)]
        return Evaluation(metrics, examples)

    def calibration(self, n_samples: int, seq_len: int) -> list[Tensor]:
        return shakespeare_calibration(self.tokenizer, n_samples, seq_len)


@torch.no_grad()
def window_losses(
    model: nn.Module, windows: Tensor, batch_size: int, tokenizer: Tokenizer
) -> tuple[np.ndarray, np.ndarray]:
    """Per window: summed next-token loss (nats, float64) and the UTF-8 bytes of its targets."""
    device = model_device(model)
    nats = []
    for chunk in windows.split(batch_size):
        x, y = chunk[:, :-1], chunk[:, 1:]
        logits = model(input_ids=x.to(device)).logits.float()
        losses = F.cross_entropy(logits.flatten(0, 1), y.to(device).flatten(), reduction="none")
        nats.append(losses.view(y.shape).double().sum(dim=1).cpu().numpy())
    targets = windows[:, 1:].numpy()
    return np.concatenate(nats), tokenizer.byte_lengths[targets].sum(axis=1)
