"""Causal language modelling on a text corpus (SPEC section 4, task type `lm`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.tasks.base import Batch, Task
from harness.tasks.catalog import LMTaskSpec
from harness.tasks.corpora import (
    Tokenizer,
    TokenSplits,
    corpus_fingerprint,
    lm_splits,
    model_vocab_size,
)

Tokens = Tensor | np.ndarray
"""A split's tokens: a tensor, or a numpy array (in memory or memory-mapped)."""


def window_starts(n_tokens: int, seq_len: int, n_windows: int) -> np.ndarray:
    """Up to `n_windows` evenly spaced starts of non-overlapping windows of `seq_len + 1` tokens.

    Starts are `i * (len - seq_len - 1) // (k - 1)`: consecutive starts differ by at least
    `seq_len`, so the targets of different windows never overlap.
    """
    k = min(n_windows, (n_tokens - 1) // seq_len)
    span = n_tokens - seq_len - 1
    return np.arange(k, dtype=np.int64) * span // max(k - 1, 1)


def gather(tokens: Tokens, starts: np.ndarray, length: int) -> Tensor:
    """The windows `tokens[start : start + length]` as an int64 tensor (reads only them from
    a memory-mapped array)."""
    index = starts[:, None] + np.arange(length)
    if isinstance(tokens, Tensor):
        return tokens[torch.from_numpy(index)]
    return torch.from_numpy(np.asarray(tokens[index], dtype=np.int64))


def eval_windows(tokens: Tokens, seq_len: int, n_windows: int) -> Tensor:
    """Up to `n_windows` evenly spaced, non-overlapping windows of `seq_len + 1` tokens."""
    return gather(tokens, window_starts(len(tokens), seq_len, n_windows), seq_len + 1)


def all_windows(tokens: Tokens, seq_len: int, batch_size: int) -> Iterator[Tensor]:
    """Windows whose targets cover every token of `tokens` but the first once: consecutive
    windows of `seq_len + 1` tokens overlapping by one, then a shorter last one if any; read
    `batch_size` windows at a time (memory does not grow with the split)."""
    n_full = (len(tokens) - 1) // seq_len
    for first in range(0, n_full, batch_size):
        starts = np.arange(first, min(first + batch_size, n_full), dtype=np.int64) * seq_len
        yield gather(tokens, starts, seq_len + 1)
    rest = len(tokens) - n_full * seq_len
    if rest > 1:
        yield gather(tokens, np.array([n_full * seq_len]), rest)


def perplexity(loss: float) -> float:
    """exp(loss), infinite instead of overflowing."""
    return math.inf if loss > 709.0 else math.exp(loss)


def model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


class LMTask(Task):
    """Next-token prediction on a corpus or prepared dataset, split by document; reports loss,
    ppl and bits per byte (against the UTF-8 bytes of the evaluated text, whatever the
    tokenizer). A fine-tuning trial passes its pretrained model's `tokenizer` (used where the
    section's tokenizer is `model`)."""

    def __init__(self, spec: LMTaskSpec, tokenizer: Tokenizer | None = None) -> None:
        self.spec = spec
        self.data: TokenSplits = lm_splits(spec, tokenizer)
        self.tokens: dict[str, Tokens] = {  # a corpus's tokens in memory, a dataset's mapped
            name: tokens if isinstance(tokens, np.memmap) else torch.from_numpy(tokens)
            for name, tokens in self.data.tokens.items()
        }
        for name, tokens in self.tokens.items():
            if len(tokens) <= spec.seq_len:
                raise ValueError(
                    f"the {name} split of {self.data.source} has {len(tokens)} tokens, "
                    f"fewer than seq_len + 1 = {spec.seq_len + 1}"
                )
        self.vocab_size = model_vocab_size(spec, self.data)
        self.seq_len = spec.seq_len

    fingerprint = staticmethod(corpus_fingerprint)

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        """Random windows of the concatenated train documents, positions drawn from `generator`
        (so the generator's state is the data position a resumed trial restores)."""
        tokens = self.tokens["train"]
        while True:
            starts = torch.randint(
                0, len(tokens) - self.seq_len, (batch_size,), generator=generator
            )
            windows = gather(tokens, starts.numpy(), self.seq_len + 1)
            yield windows[:, :-1], windows[:, 1:]

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        x, y = batch
        logits = model(input_ids=x).logits
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())

    def evaluate(
        self, model: nn.Module, batch_size: int, n_batches: int, final: bool
    ) -> dict[str, float]:
        """Loss, perplexity and bits per byte on fixed windows of val (and, if final, test);
        with `eval: {tokens: all}`, the final evaluation reads every token of both."""
        was_training = model.training
        model.eval()
        whole = final and self.spec.eval is not None and self.spec.eval.tokens == "all"
        n_windows = None if whole else n_batches
        try:
            val_loss, val_bpb = self._split_loss(model, "val", batch_size, n_windows)
            metrics = {
                "val_loss": val_loss,
                "val_ppl": perplexity(val_loss),
                "bits_per_byte": val_bpb,
            }
            if final:
                test_loss, test_bpb = self._split_loss(model, "test", batch_size, n_windows)
                metrics |= {
                    "test_loss": test_loss,
                    "test_ppl": perplexity(test_loss),
                    "test_bits_per_byte": test_bpb,
                }
        finally:
            model.train(was_training)
        return metrics

    def _split_loss(
        self, model: nn.Module, split: str, batch_size: int, n_batches: int | None
    ) -> tuple[float, float]:
        """Mean loss (nats per token) and bits per byte over the split's evaluation windows
        (every token of the split for `n_batches` None)."""
        tokens = self.tokens[split]
        windows: Iterable[Tensor]
        if n_batches is None:
            windows = all_windows(tokens, self.seq_len, batch_size)
        else:
            windows = [eval_windows(tokens, self.seq_len, batch_size * n_batches)]
        nats, n_tokens, n_bytes = 0.0, 0, 0
        for group in windows:
            loss = token_loss(model, group, batch_size, self.data.byte_lengths)
            nats, n_tokens, n_bytes = nats + loss[0], n_tokens + loss[1], n_bytes + loss[2]
        return nats / n_tokens, nats / math.log(2) / n_bytes


@torch.no_grad()
def token_loss(
    model: nn.Module, windows: Tensor, batch_size: int, byte_lengths: np.ndarray
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
        n_bytes += int(byte_lengths[y.numpy()].sum())
    return nats, n_tokens, n_bytes
