"""The workload interface (AlgoPerf's split): a task owns its data, loss and evaluation.

The runner owns the clock and the optimizer; it asks the task for batches, a loss to
minimise, and evaluation metrics.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

Batch = tuple[Tensor, ...]


class Task(ABC):
    """A training task: batches, loss and evaluation metrics."""

    vocab_size: int
    seq_len: int

    @staticmethod
    @abstractmethod
    def fingerprint(spec: Any) -> str:
        """A hash of the data the task with section `spec` reads, part of every trial key.

        Cheap and torch-free (it hashes files or the spec; it never tokenizes): planning calls
        the registry entry's copy of it without importing the task's module."""

    @abstractmethod
    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        """An endless stream of training batches (CPU tensors), ordered by `generator` only."""

    @abstractmethod
    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        """The scalar training loss of `model` on `batch` (already on the model's device)."""

    @abstractmethod
    def evaluate(
        self, model: nn.Module, batch_size: int, n_batches: int, final: bool
    ) -> dict[str, float]:
        """Validation metrics (always `val_loss`); with `final`, the test-split metrics too.

        Deterministic: the same model gives the same numbers whatever the training seed.
        """

    @staticmethod
    def batch_tokens(batch: Batch) -> int:
        """Tokens (input positions) in a batch, for throughput accounting."""
        return batch[0].numel()


@dataclass(frozen=True)
class Evaluation:
    """What an evaluation-only task reports: its metrics and the per-example outcomes behind them.

    `examples` maps a metric to {example id: value}: 0/1 per example for an accuracy, bits per
    byte per window for a perplexity task (with the window's bytes under `weight_name(metric)`).
    An evaluation-only trial has one seed, so these examples carry its uncertainty.
    """

    metrics: dict[str, float]
    examples: dict[str, dict[str, float]] = field(default_factory=dict)


def weight_name(metric: str) -> str:
    """The per-example weights of a ratio metric (bytes per window for bits per byte)."""
    return f"{metric}:weight"


class EvalTask(ABC):
    """An evaluation-only task of a pretrained model: lm-eval tasks, perplexity on a corpus.

    A task has a tuning split (`val_*` metrics) and a reporting split (the other metrics) where
    its data has two; see each task.
    """

    @staticmethod
    @abstractmethod
    def fingerprint(spec: Any) -> str:
        """A hash of the data the task reads (as `Task.fingerprint`)."""

    @abstractmethod
    def evaluate(self, model: nn.Module, batch_size: int) -> Evaluation:
        """The task's metrics for `model` (lm-eval's names) and its per-example outcomes."""

    @abstractmethod
    def calibration(self, n_samples: int, seq_len: int) -> list[Tensor]:
        """Token batches for data-aware pruning and quantization criteria."""
