"""Causal language modelling on a text corpus (SPEC section 4, task type `lm`)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.tasks.base import Batch, Task
from harness.tasks.catalog import LMTaskSpec, corpus_fingerprint
from harness.tasks.corpora import (
    Corpus,
    Document,
    Tokenizer,
    build_tokenizer,
    load_corpus,
    split_documents,
)


def eval_windows(tokens: Tensor, seq_len: int, n_windows: int) -> Tensor:
    """Up to `n_windows` evenly spaced, non-overlapping windows of `seq_len + 1` tokens.

    Starts are `i * (len - seq_len - 1) // (k - 1)`: consecutive starts differ by at least
    `seq_len`, so the targets of different windows never overlap.
    """
    k = min(n_windows, (len(tokens) - 1) // seq_len)
    span = len(tokens) - seq_len - 1
    starts = torch.arange(k) * span // max(k - 1, 1)
    return tokens[starts[:, None] + torch.arange(seq_len + 1)]


def perplexity(loss: float) -> float:
    """exp(loss), infinite instead of overflowing."""
    return math.inf if loss > 709.0 else math.exp(loss)


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


class LMTask(Task):
    """Next-token prediction on a corpus, split by document; reports loss, ppl and bits/byte."""

    def __init__(self, spec: LMTaskSpec) -> None:
        self.spec = spec
        self.corpus: Corpus = load_corpus(spec.corpus)
        self.tokenizer: Tokenizer = build_tokenizer(spec.tokenizer, self.corpus)
        self.splits = split_documents(
            self.corpus.documents, spec.val_fraction, spec.test_fraction, spec.split_seed
        )
        self.tokens = {name: self._encode(docs) for name, docs in self.splits.items()}
        for name, tokens in self.tokens.items():
            if len(tokens) <= spec.seq_len:
                raise ValueError(
                    f"the {name} split of corpus '{spec.corpus}' has {len(tokens)} tokens, "
                    f"fewer than seq_len + 1 = {spec.seq_len + 1}"
                )
        self.vocab_size = self.tokenizer.vocab_size
        self.seq_len = spec.seq_len

    fingerprint = staticmethod(corpus_fingerprint)

    def _encode(self, documents: list[Document]) -> Tensor:
        text = "\n".join(text for _, text in documents)
        return torch.from_numpy(self.tokenizer.encode(text))

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        """Random windows of the concatenated train documents, positions drawn from `generator`."""
        tokens = self.tokens["train"]
        offsets = torch.arange(self.seq_len + 1)
        while True:
            starts = torch.randint(
                0, len(tokens) - self.seq_len, (batch_size,), generator=generator
            )
            windows = tokens[starts[:, None] + offsets]
            yield windows[:, :-1], windows[:, 1:]

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        x, y = batch
        logits = model(input_ids=x).logits
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())

    def evaluate(
        self, model: nn.Module, batch_size: int, n_batches: int, final: bool
    ) -> dict[str, float]:
        """Loss, perplexity and bits per byte on fixed windows of val (and, if final, test)."""
        was_training = model.training
        model.eval()
        try:
            val_loss, val_bpb = self._split_loss(model, "val", batch_size, n_batches)
            metrics = {
                "val_loss": val_loss,
                "val_ppl": perplexity(val_loss),
                "bits_per_byte": val_bpb,
            }
            if final:
                test_loss, test_bpb = self._split_loss(model, "test", batch_size, n_batches)
                metrics |= {
                    "test_loss": test_loss,
                    "test_ppl": perplexity(test_loss),
                    "test_bits_per_byte": test_bpb,
                }
        finally:
            model.train(was_training)
        return metrics

    def _split_loss(
        self, model: nn.Module, split: str, batch_size: int, n_batches: int
    ) -> tuple[float, float]:
        """Mean loss (nats per token) and bits per byte over the split's evaluation windows."""
        windows = eval_windows(self.tokens[split], self.seq_len, batch_size * n_batches)
        nats, n_tokens, n_bytes = token_loss(model, windows, batch_size, self.tokenizer)
        return nats / n_tokens, nats / math.log(2) / n_bytes


@torch.no_grad()
def token_loss(
    model: nn.Module, windows: Tensor, batch_size: int, tokenizer: Tokenizer
) -> tuple[float, int, int]:
    """Summed next-token loss (nats), target tokens and their UTF-8 bytes over `windows`."""
    device = model_device(model)
    nats, n_tokens, n_bytes = 0.0, 0, 0
    for chunk in windows.split(batch_size):
        x, y = chunk[:, :-1], chunk[:, 1:]
        logits = model(input_ids=x.to(device)).logits
        nats += F.cross_entropy(
            logits.float().flatten(0, 1), y.to(device).flatten(), reduction="sum"
        ).item()
        n_tokens += y.numel()
        n_bytes += tokenizer.n_bytes(y.numpy())
    return nats, n_tokens, n_bytes
