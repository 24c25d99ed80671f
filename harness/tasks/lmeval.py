"""Evaluation-only tasks of pretrained models (SPEC section 4): `lm-eval` and `perplexity`.

`lm-eval` runs EleutherAI's lm-evaluation-harness (`simple_evaluate` with `HFLM` wrapping the
trial's model object) on an installed task or a local task YAML from `suites/tasks/`.
`perplexity` measures loss, perplexity and bits per byte of a corpus split with the model's
own tokenizer. Calibration data for pruning and quantization is held-out Shakespeare text.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field, NonNegativeInt, PositiveInt, field_validator
from torch import Tensor, nn

from harness.registry import TASKS
from harness.spec.schema import StrictModel
from harness.tasks.base import EvalTask
from harness.tasks.corpora import ModelTokenizer, load_corpus
from harness.tasks.lm import (
    eval_windows,
    known_corpus,
    perplexity,
    split_documents,
    token_loss,
)

LOCAL_TASKS = Path(__file__).resolve().parents[2] / "suites" / "tasks"
CALIBRATION_CORPUS = "shakespeare"
SKIP = {"alias", "sample_len"}


class LMEvalTaskSpec(StrictModel):
    """A task section of type `lm-eval`: one lm-evaluation-harness task."""

    type: Literal["lm-eval"] = "lm-eval"
    task: str = Field(min_length=1)
    limit: PositiveInt | None = None
    num_fewshot: NonNegativeInt = 0
    include_path: str | None = None


class PerplexityTaskSpec(StrictModel):
    """A task section of type `perplexity`: a corpus split, the model's tokenizer."""

    type: Literal["perplexity"] = "perplexity"
    corpus: str = "shakespeare"
    split: Literal["val", "test"] = "test"
    seq_len: PositiveInt = 256
    windows: PositiveInt = 64
    split_seed: int = 0
    val_fraction: float = Field(0.1, gt=0.0, lt=1.0)
    test_fraction: float = Field(0.1, gt=0.0, lt=1.0)

    _known_corpus = field_validator("corpus")(known_corpus)


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


def include_path(spec: LMEvalTaskSpec) -> Path:
    return Path(spec.include_path).expanduser() if spec.include_path else LOCAL_TASKS


def files_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        if path.is_file():
            digest.update(path.relative_to(folder).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def lm_eval_metrics(results: dict[str, Any], task: str) -> dict[str, float]:
    """`{"acc,none": 0.5, "acc_stderr,none": ...}` -> `{"acc": 0.5, "acc_stderr": ...}`."""
    metrics = {}
    for key, value in results["results"][task].items():
        name, _, _filter = key.partition(",")
        if isinstance(value, int | float) and not isinstance(value, bool) and name not in SKIP:
            metrics[name] = float(value)
    return metrics


@TASKS.register("lm-eval", params=LMEvalTaskSpec, eval_only=True)
class LMEvalTask(EvalTask):
    """An lm-evaluation-harness task, run on the trial's model object (EleutherAI, 2021)."""

    def __init__(self, spec: LMEvalTaskSpec, tokenizer: ModelTokenizer) -> None:
        self.spec = spec
        self.tokenizer = tokenizer

    @staticmethod
    def fingerprint(spec: LMEvalTaskSpec) -> str:
        """The local task definitions and the data they read (lm-eval's version is in the key)."""
        from harness.tasks.bigbench import data_digest

        return hashlib.sha256(
            (files_digest(include_path(spec)) + data_digest()).encode()
        ).hexdigest()

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


@TASKS.register("perplexity", params=PerplexityTaskSpec, eval_only=True)
class PerplexityTask(EvalTask):
    """Loss, perplexity and bits per byte of a corpus split in the model's own tokens."""

    def __init__(self, spec: PerplexityTaskSpec, tokenizer: ModelTokenizer) -> None:
        self.spec = spec
        self.tokenizer = tokenizer
        fractions = (spec.val_fraction, spec.test_fraction)
        self.tokens = corpus_split_tokens(
            spec.corpus, spec.split, tokenizer, spec.split_seed, fractions
        )

    @staticmethod
    def fingerprint(spec: PerplexityTaskSpec) -> str:
        return load_corpus(spec.corpus).fingerprint()

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
