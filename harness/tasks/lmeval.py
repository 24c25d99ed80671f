"""Evaluation-only tasks of pretrained models (SPEC section 4): `lm-eval` and `perplexity`.

`lm-eval` runs EleutherAI's lm-evaluation-harness (`simple_evaluate` with `HFLM` wrapping the
trial's model object) on an installed task or a local task YAML from `suites/tasks/`.
`perplexity` measures loss, perplexity and bits per byte of a corpus split with the model's
own tokenizer. Calibration data for pruning and quantization is held-out Shakespeare text.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from harness.tasks.base import EvalTask
from harness.tasks.catalog import (
    LMEvalTaskSpec,
    PerplexityTaskSpec,
    corpus_fingerprint,
    include_path,
    lm_eval_fingerprint,
)
from harness.tasks.corpora import ModelTokenizer, load_corpus
from harness.tasks.lm import (
    eval_windows,
    perplexity,
    split_documents,
    token_loss,
)

CALIBRATION_CORPUS = "shakespeare"
SKIP = {"alias", "sample_len"}


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
        if isinstance(value, int | float) and not isinstance(value, bool) and name not in SKIP:
            metrics[name] = float(value)
    return metrics


class LMEvalTask(EvalTask):
    """An lm-evaluation-harness task, run on the trial's model object (EleutherAI, 2021)."""

    def __init__(self, spec: LMEvalTaskSpec, tokenizer: ModelTokenizer) -> None:
        self.spec = spec
        self.tokenizer = tokenizer

    fingerprint = staticmethod(lm_eval_fingerprint)

    def evaluate(self, model: nn.Module, batch_size: int) -> dict[str, float]:
        """`lm_eval.simple_evaluate` with `HFLM` around this very model object."""
        from lm_eval import simple_evaluate
        from lm_eval.models.huggingface import HFLM
        from lm_eval.tasks import TaskManager

        device = next(model.parameters()).device
        lm = HFLM(
            pretrained=model, tokenizer=self.tokenizer.hf, batch_size=batch_size, device=str(device)
        )
        manager = TaskManager(include_path=str(include_path(self.spec)))
        results = simple_evaluate(
            model=lm,
            tasks=[self.spec.task],
            task_manager=manager,
            num_fewshot=self.spec.num_fewshot,
            limit=self.spec.limit,
            log_samples=False,
            bootstrap_iters=0,
        )
        return lm_eval_metrics(results, self.spec.task)

    def calibration(self, n_samples: int, seq_len: int) -> list[Tensor]:
        return shakespeare_calibration(self.tokenizer, n_samples, seq_len)


class PerplexityTask(EvalTask):
    """Loss, perplexity and bits per byte of a corpus split in the model's own tokens."""

    def __init__(self, spec: PerplexityTaskSpec, tokenizer: ModelTokenizer) -> None:
        self.spec = spec
        self.tokenizer = tokenizer
        fractions = (spec.val_fraction, spec.test_fraction)
        self.tokens = corpus_split_tokens(
            spec.corpus, spec.split, tokenizer, spec.split_seed, fractions
        )

    fingerprint = staticmethod(corpus_fingerprint)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, batch_size: int) -> dict[str, float]:
        windows = eval_windows(self.tokens, self.spec.seq_len, self.spec.windows)
        nats, n_tokens, n_bytes = token_loss(model, windows, batch_size, self.tokenizer)
        loss = nats / n_tokens
        return {
            f"{self.spec.split}_loss": loss,
            f"{self.spec.split}_ppl": perplexity(loss),
            "bits_per_byte": nats / math.log(2) / n_bytes,
        }

    def calibration(self, n_samples: int, seq_len: int) -> list[Tensor]:
        return shakespeare_calibration(self.tokenizer, n_samples, seq_len)
