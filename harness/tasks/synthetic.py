"""Generated tasks with an in-distribution and an out-of-distribution split (SPEC section 4).

A task section `{type: synthetic, kind: <kind>, ...}` names a kind registered in
SYNTHETIC_KINDS; the kind's own parameters sit beside `kind` and are validated against the
schema the kind registers. Evaluation sets are fixed by `data_seed`; training batches are drawn
with the trial's generator. Targets are -100 except at answer positions, so the loss and the
accuracy count answers only.

Three evaluation sets: `id` (in-distribution validation, for tuning: `val_loss`, `id_*`),
`test` (in-distribution, disjoint from `id`, for reporting: `test_*`, at the end of training
only) and `ood` (out of distribution, for reporting: `ood_*`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.registry import SYNTHETIC_KINDS
from harness.tasks.base import Batch, Task
from harness.tasks.catalog import (
    ModularAdditionParams,
    PolyRegressionParams,
    SyntheticTaskSpec,
    synthetic_fingerprint,
)
from harness.tasks.trivial import SYNTHETIC_SETS

IGNORE = -100
"""Target of a position that is not an answer (ignored by the loss and the accuracy)."""

EVAL_SPLITS = ("id", "ood")
"""Evaluated at every evaluation; `test` only at the final one."""


class SyntheticKind(ABC):
    """A generated task: a training sampler and fixed ID, ID test and OOD evaluation sets.

    Subclasses are constructed as `Kind(params, data_seed, n_eval)`, `params` being an instance
    of the schema they register.
    """

    vocab_size: int
    seq_len: int
    eval_sets: dict[str, Batch]
    """`id`, `test` and `ood`: (inputs, targets), fixed by the data seed."""

    @abstractmethod
    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        """A training batch drawn with `generator`."""


def answer_targets(inputs: Tensor, answers: Tensor) -> Tensor:
    """Targets that ignore every position but the last, whose target is `answers`."""
    targets = torch.full_like(inputs, IGNORE)
    targets[:, -1] = answers
    return targets


class ModularAddition(SyntheticKind):
    """`a + b =` -> `(a + b) mod p`, the algorithmic task of Power et al. (2022), "Grokking:
    Generalization Beyond Overfitting on Small Algorithmic Datasets", arXiv:2201.02177.

    Tokens: `0..p-1` are numbers, `p` is `+`, `p + 1` is `=`. "a + b = c" gives the inputs
    `(a, +, b, =)` and the targets `(-100, -100, -100, c)`.
    - Training, ID and ID test: all p^2 pairs are permuted with `data_seed`; the first
      `train_fraction` of them are trained on, the next `n_eval` are the ID set and the
      `n_eval` after them the ID test set (each half of the held-out pairs when there are
      fewer than `2 * n_eval`).
    - OOD (a length and composition shift): `n_eval` random triples "a + b + c =" ->
      `(a + b + c) mod p`, never seen in training (inputs 6 tokens long instead of 4).
    """

    def __init__(self, params: ModularAdditionParams, data_seed: int, n_eval: int) -> None:
        p = params.modulus
        self.modulus = p
        self.vocab_size = p + 2
        self.seq_len = 6
        rng = np.random.default_rng(data_seed)
        pairs = torch.from_numpy(rng.permutation(p * p))
        pairs = torch.stack([pairs // p, pairs % p], dim=1)
        n_train = min(max(1, round(params.train_fraction * p * p)), p * p - 2)
        self.train_pairs = pairs[:n_train]
        held_out = pairs[n_train:]
        n_id = min(n_eval, len(held_out) // 2)
        self.eval_sets = {
            "id": self.sequences(held_out[:n_id]),
            "test": self.sequences(held_out[n_id : n_id + n_eval]),
            "ood": self.sequences(torch.from_numpy(rng.integers(0, p, size=(n_eval, 3)))),
        }

    def sequences(self, operands: Tensor) -> Batch:
        """Inputs `o1 + o2 (+ o3) =` and the answer target for rows of operands."""
        n, k = operands.shape
        plus = torch.full((n, 1), self.modulus)
        parts = [part for i in range(k) for part in (operands[:, i : i + 1], plus)]
        parts[-1] = torch.full((n, 1), self.modulus + 1)
        inputs = torch.cat(parts, dim=1).long()
        return inputs, answer_targets(inputs, operands.sum(dim=1) % self.modulus)

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        rows = torch.randint(0, len(self.train_pairs), (batch_size,), generator=generator)
        return self.sequences(self.train_pairs[rows])


ID_MAX_X = 0.5
"""In-distribution inputs are at most this; out-of-distribution inputs lie above it."""


class PolyRegression(SyntheticKind):
    """Polynomial regression with shifted inputs, after the controlled setting of Sharma et al.
    (2026), "TAPIOCA: Why Task-Aware Pruning Improves OOD Model Capability", arXiv:2605.14738.

    A fixed polynomial f: its degree is drawn uniformly from `2..max_degree` and its
    coefficients from N(0, 1), both by `data_seed`. For a token model, [-1, 1] is cut into
    `n_bins` equal bins: an x is the centre of its bin (token `0..n_bins-1`); y = f(x) is
    binned over [min f, max f] on [-1, 1] (token `n_bins + bin`). A sequence holds `n_context`
    (x, y) pairs and a query x; the target is the query's y bin (the only scored position).
    - ID (training, the ID and the ID test set): every x in the sequence is drawn uniformly
      from the bins whose centre is in [-1, 0.5]; the ID test set is drawn after the OOD set.
    - OOD: every x is drawn uniformly from the bins whose centre is in (0.5, 1].
    """

    def __init__(self, params: PolyRegressionParams, data_seed: int, n_eval: int) -> None:
        n_bins = params.n_bins
        self.n_bins = n_bins
        self.vocab_size = 2 * n_bins
        self.n_points = params.n_context + 1
        self.seq_len = 2 * self.n_points - 1
        rng = np.random.default_rng(data_seed)
        degree = int(rng.integers(2, params.max_degree + 1))
        self.coefficients = rng.standard_normal(degree + 1)
        self.centres = -1.0 + (np.arange(n_bins) + 0.5) * 2.0 / n_bins
        self.y_tokens = torch.from_numpy(n_bins + self._y_bins(self.centres))
        self.id_bins = torch.from_numpy(np.flatnonzero(self.centres <= ID_MAX_X))
        self.ood_bins = torch.from_numpy(np.flatnonzero(self.centres > ID_MAX_X))
        id_set = self.sequences(self._draw(rng, self.id_bins, n_eval))
        ood_set = self.sequences(self._draw(rng, self.ood_bins, n_eval))
        test_set = self.sequences(self._draw(rng, self.id_bins, n_eval))
        self.eval_sets = {"id": id_set, "test": test_set, "ood": ood_set}

    def _draw(self, rng: np.random.Generator, bins: Tensor, n: int) -> Tensor:
        """`n` rows of `n_points` x bins drawn uniformly from `bins`."""
        return torch.from_numpy(rng.choice(bins.numpy(), size=(n, self.n_points)))

    def f(self, x: np.ndarray) -> np.ndarray:
        return np.polynomial.polynomial.polyval(x, self.coefficients)

    def _y_bins(self, x: np.ndarray) -> np.ndarray:
        """Bins of f(x) over the range of f on [-1, 1] (a dense grid plus the bin centres)."""
        span = self.f(np.concatenate([np.linspace(-1.0, 1.0, 4097), self.centres]))
        low, high = span.min(), span.max()
        scaled = np.floor((self.f(x) - low) / (high - low) * self.n_bins)
        return scaled.clip(0, self.n_bins - 1).astype(np.int64)

    def sequences(self, x_bins: Tensor) -> Batch:
        """`x1 y1 ... xq` inputs and the query's y token as the target, for rows of x bins."""
        tokens = torch.stack([x_bins, self.y_tokens[x_bins]], dim=2).flatten(1).long()
        inputs = tokens[:, :-1]
        return inputs, answer_targets(inputs, tokens[:, -1])

    def sample(self, batch_size: int, generator: torch.Generator) -> Batch:
        picks = torch.randint(
            0, len(self.id_bins), (batch_size, self.n_points), generator=generator
        )
        return self.sequences(self.id_bins[picks])


class SyntheticTask(Task):
    """A synthetic kind as a training task; reports id/ood loss and accuracy (val_loss = id),
    and at the end of training the ID test set's (`test_loss`, `test_acc`)."""

    def __init__(self, spec: SyntheticTaskSpec) -> None:
        self.spec = spec
        kind_cls = SYNTHETIC_KINDS.get(spec.kind)
        self.kind: SyntheticKind = kind_cls(spec.kind_params(), spec.data_seed, spec.n_eval)
        self.vocab_size = self.kind.vocab_size
        self.seq_len = self.kind.seq_len

    fingerprint = staticmethod(synthetic_fingerprint)

    def train_batches(self, batch_size: int, generator: torch.Generator) -> Iterator[Batch]:
        while True:
            yield self.kind.sample(batch_size, generator)

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        x, y = batch
        logits = model(input_ids=x).logits
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), ignore_index=IGNORE)

    def evaluate(
        self, model: nn.Module, batch_size: int, n_batches: int, final: bool
    ) -> dict[str, float]:
        """Loss and accuracy at the answer positions of the first `batch_size * n_batches`
        sequences of the fixed ID and OOD sets, and with `final` of the ID test set.
        """
        was_training = model.training
        model.eval()
        try:
            metrics: dict[str, float] = {}
            for split in SYNTHETIC_SETS if final else EVAL_SPLITS:
                inputs, targets = (t[: batch_size * n_batches] for t in self.kind.eval_sets[split])
                loss, acc = self._answer_metrics(model, inputs, targets, batch_size)
                metrics |= {f"{split}_loss": loss, f"{split}_acc": acc}
        finally:
            model.train(was_training)
        return {"val_loss": metrics["id_loss"], **metrics}

    @torch.no_grad()
    def _answer_metrics(
        self, model: nn.Module, inputs: Tensor, targets: Tensor, batch_size: int
    ) -> tuple[float, float]:
        """Mean loss (nats) and argmax accuracy over the answer positions."""
        device = next(model.parameters()).device
        nats, correct, count = 0.0, 0, 0
        for x, y in zip(inputs.split(batch_size), targets.split(batch_size), strict=True):
            logits = model(input_ids=x.to(device)).logits.float()
            y = y.to(device)
            nats += F.cross_entropy(
                logits.flatten(0, 1), y.flatten(), ignore_index=IGNORE, reduction="sum"
            ).item()
            scored = y != IGNORE
            correct += int((logits.argmax(dim=-1) == y)[scored].sum())
            count += int(scored.sum())
        return nats / count, correct / count
