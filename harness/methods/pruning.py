"""Layer pruning of a trained or pretrained model (SPEC 5.5), each criterion registered in PRUNING.

A criterion is called as `criterion(model, spec, context, k)` and returns a `LayerChoice`: the `k`
layers to remove (block indices, or the blocks whose attention / MLP sublayer goes when
`spec.target` is `attention` / `mlp`) and its score per layer. `prune_model` applies it with
`harness.methods.layers.remove_layers`: removed blocks leave the model (the config's layer count
follows), a removed sublayer's residual branch contributes zero. Each criterion's registry entry
lists the targets it supports (`targets`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from harness.methods.layers import (
    blocks,
    layers_removed,
    observe_streams,
    remove_layers,
    sublayer,
)
from harness.registry import PRUNING, PruneTarget
from harness.spec.constraints import layers_to_remove, prune_problems
from harness.spec.sections import PruneSpec


@dataclass(frozen=True)
class PruneContext:
    """What a criterion may use: calibration batches, a validation loss, the trial's seed."""

    calibration: list[Tensor]
    evaluate: Callable[[nn.Module], float] | None
    seed: int


@dataclass(frozen=True)
class PruneReport:
    """What was removed, in the original numbering, and the criterion's score per layer.

    `layers_before` / `layers_after` count units of the target kind: blocks, or attention / MLP
    sublayers.
    """

    removed: list[int]
    scores: dict[int, float]
    layers_before: int
    layers_after: int


@dataclass(frozen=True)
class LayerChoice:
    """A criterion's choice: the layers to remove and its score per layer."""

    removed: list[int]
    scores: dict[int, float]


Criterion = Callable[[nn.Module, PruneSpec, PruneContext, int], LayerChoice]


def prune_model(
    model: nn.Module, spec: PruneSpec, context: PruneContext
) -> tuple[nn.Module, PruneReport]:
    """Remove the layers `spec.criterion` picks from `model` (in place); return it and a report."""
    entry = PRUNING.entry(spec.criterion)
    for _, message in prune_problems(spec, entry, None):
        raise ValueError(message)
    n_layers = len(blocks(model))
    k = layers_to_remove(spec, n_layers)
    criterion: Criterion = entry.obj
    selection = criterion(model, spec, context, k)
    remove_layers(model, selection.removed, spec.target)
    report = PruneReport(sorted(selection.removed), selection.scores, n_layers, n_layers - k)
    return model, report


def lowest(scores: dict[int, float], k: int) -> list[int]:
    """The `k` keys of lowest score (ties: the lower index)."""
    return sorted(sorted(scores, key=lambda i: (scores[i], i))[:k])


def highest(scores: dict[int, float], k: int) -> list[int]:
    """The `k` keys of highest score (ties: the lower index)."""
    return lowest({i: -score for i, score in scores.items()}, k)


def calibration_batches(context: PruneContext, samples: int) -> list[Tensor]:
    """The first `samples` sequences of the calibration batches."""
    batches, left = [], samples
    for batch in context.calibration:
        if left <= 0:
            break
        batches.append(batch[:left])
        left -= len(batches[-1])
    if not batches:
        raise ValueError("this pruning criterion needs calibration batches")
    return batches


def mean_cosines(model: nn.Module, batches: Sequence[Tensor], target: PruneTarget) -> list[float]:
    """Per unit (block or sublayer): the mean over tokens of cos(x_in, x_out) of its residuals."""
    sums = [0.0] * len(blocks(model))
    counts = [0] * len(sums)

    def observe(i: int, x_in: Tensor, x_out: Tensor) -> None:
        sums[i] += float(torch.nn.functional.cosine_similarity(x_in, x_out, dim=-1).double().sum())
        counts[i] += len(x_in)

    observe_streams(model, batches, target, observe)
    return [total / count for total, count in zip(sums, counts, strict=True)]


def block_influence(
    model: nn.Module, spec: PruneSpec, context: PruneContext, k: int
) -> LayerChoice:
    """ShortGPT (Men et al., 2024): remove the k layers of lowest BI = 1 - E[cos(x_in, x_out)].

    For `attention` / `mlp` the same score is taken around the sublayer, as "What Matters in
    Transformers? Not All Attention is Needed" (He et al., 2024) does (pre-norm blocks only).
    """
    cosines = mean_cosines(
        model, calibration_batches(context, spec.calibration_samples), spec.target
    )
    scores = {i: 1.0 - cosine for i, cosine in enumerate(cosines)}
    return LayerChoice(lowest(scores, k), scores)


class LinearFit:
    """Running sums for the least-squares fit of centered Y by centered X (float64)."""

    def __init__(self) -> None:
        self.n = 0
        self.sums: dict[str, Tensor] = {}

    def update(self, x: Tensor, y: Tensor) -> None:
        x, y = x.double(), y.double()
        terms = {"x": x.sum(0), "y": y.sum(0), "xx": x.T @ x, "xy": x.T @ y, "yy": (y * y).sum()}
        for key, value in terms.items():
            self.sums[key] = self.sums[key] + value if key in self.sums else value
        self.n += len(x)

    def score(self) -> float:
        """1 - min_A ||X~ A - Y~||_F^2, X~ and Y~ centered and scaled to unit Frobenius norm."""
        s, n = self.sums, self.n
        if n <= len(s["x"]):
            raise ValueError(
                f"a linear fit needs more calibration tokens than {len(s['x'])}, not {n}"
            )
        cxx = s["xx"] - torch.outer(s["x"], s["x"]) / n
        cxy = s["xy"] - torch.outer(s["x"], s["y"]) / n
        cyy = s["yy"] - s["y"] @ s["y"] / n
        explained = torch.trace(cxy.T @ torch.linalg.pinv(cxx, hermitian=True) @ cxy)
        return float(explained / cyy)


def linearity(model: nn.Module, spec: PruneSpec, context: PruneContext, k: int) -> LayerChoice:
    """Linearity (Razzhigaev et al., 2024): remove the k blocks of highest Procrustes linearity.

    "Your Transformer is Secretly Linear": the linearity score of a block is
    1 - min_A ||X~ A - Y~||_F^2, X and Y its input and output hidden states over the calibration
    tokens, centered and normalized to Frobenius norm 1.
    """
    fits = [LinearFit() for _ in blocks(model)]
    batches = calibration_batches(context, spec.calibration_samples)
    observe_streams(model, batches, "block", lambda i, x, y: fits[i].update(x, y))
    scores = {i: fit.score() for i, fit in enumerate(fits)}
    return LayerChoice(highest(scores, k), scores)


def gate_norm(attention: nn.Module) -> float:
    """sqrt(sum_h ||W_Q^h (W_K^h)^T||_F^2): the query-key coupling of every head, head by head.

    W^h = the head's rows of proj.weight (head_dim x d_model); head h's logits are
    x^T (W_Q^h)^T W_K^h y / sqrt(head_dim), so each head's bilinear form is scored on its own and
    heads cannot cancel (the Frobenius norm of the sum over heads could: two heads with opposite
    forms scored 0). With grouped-query attention query head h pairs with key head h // group.
    ||A^T B||_F^2 = <A A^T, B B^T> keeps it to head_dim x head_dim Gram matrices.
    """
    if not all(
        isinstance(getattr(attention, name, None), (nn.Identity, type(None)))
        for name in ("q_norm", "k_norm")
    ):
        raise ValueError(
            "attention_qk (Gate-Norm) scores W_Q W_K^T, which does not set the attention logits "
            "of a model with QK-norm; use block_influence, linearity or task_greedy instead"
        )
    head_dim = attention.head_dim
    w_q = attention.q_proj.weight.detach().double().unflatten(0, (-1, head_dim))
    w_k = attention.k_proj.weight.detach().double().unflatten(0, (-1, head_dim))
    w_k = w_k.repeat_interleave(w_q.shape[0] // w_k.shape[0], dim=0)
    gram_q, gram_k = w_q @ w_q.transpose(1, 2), w_k @ w_k.transpose(1, 2)
    return float((gram_q * gram_k).sum().clamp(min=0.0).sqrt())


def attention_qk(model: nn.Module, spec: PruneSpec, context: PruneContext, k: int) -> LayerChoice:
    """Gate-Norm (Saikumar & Varghese, 2025): remove the k attentions of weakest query-key coupling.

    "Data-Free Pruning of Self-Attention Layers in LLMs" (arXiv:2512.20636) ranks attention
    sublayers by the query-key coupling of their weights alone; our score is `gate_norm`, the
    per-head Frobenius norm of W_Q^h (W_K^h)^T (the paper's exact formula was not available to
    us, so this is our reading, documented as such). Data-free: only the query and key
    projection weights are read. RoPE is left out: the score is the coupling at relative
    offset 0 (RoPE rotates each frequency pair of q and k by the offset). Models with QK-norm,
    whose logits do not scale with W_Q and W_K, are refused.
    """
    with torch.no_grad():
        scores = {i: gate_norm(sublayer(model, i, "attention")) for i in range(len(blocks(model)))}
    return LayerChoice(lowest(scores, k), scores)


def task_greedy(model: nn.Module, spec: PruneSpec, context: PruneContext, k: int) -> LayerChoice:
    """TALE (Naim et al., 2025): k times, remove the layer whose removal least raises the val loss.

    Score of a layer: the validation loss without it (and the layers removed before), from the
    last greedy round that tried it.
    """
    if context.evaluate is None:
        raise ValueError("task_greedy needs a validation loss (PruneContext.evaluate)")
    removed: list[int] = []
    scores: dict[int, float] = {}
    for _ in range(k):
        for i in range(len(blocks(model))):
            if i not in removed:
                with layers_removed(model, [*removed, i], spec.target):
                    scores[i] = context.evaluate(model)
        removed.append(lowest({i: scores[i] for i in scores if i not in removed}, 1)[0])
    return LayerChoice(sorted(removed), scores)


def last_n(model: nn.Module, spec: PruneSpec, context: PruneContext, k: int) -> LayerChoice:
    """Baseline: remove the last k layers (score: the layer index)."""
    scores = {i: float(i) for i in range(len(blocks(model)))}
    return LayerChoice(highest(scores, k), scores)


def first_n(model: nn.Module, spec: PruneSpec, context: PruneContext, k: int) -> LayerChoice:
    """Baseline: remove the first k layers (score: the layer index)."""
    scores = {i: float(i) for i in range(len(blocks(model)))}
    return LayerChoice(lowest(scores, k), scores)


def random_layers(model: nn.Module, spec: PruneSpec, context: PruneContext, k: int) -> LayerChoice:
    """Baseline: remove k layers drawn uniformly by the trial's seed (score: a U(0, 1) draw)."""
    draws = torch.rand(len(blocks(model)), generator=torch.Generator().manual_seed(context.seed))
    scores = {i: float(draw) for i, draw in enumerate(draws)}
    return LayerChoice(lowest(scores, k), scores)
