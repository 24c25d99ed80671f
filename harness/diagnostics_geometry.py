"""The seed's geometric layer diagnostics, recorded beside `harness.diagnostics`'s (SPEC 5.7).

Representations (per block l, on the fixed probe batch, tokens as rows):
- `effective_rank`: the entropy-based effective rank of the block's output (Roy & Vetterli 2007);
- `tokenwise_share`: the share of the block's update explained by a tokenwise map (Yoo 2026,
  "On the Geometric Structure of Layer Updates in Deep Language Models", arXiv:2604.02459).
Weights (per block l, needing the weights' history across a run, `WeightTracker`):
- `layer_rotation`: cosine distance of the block's weight matrices to their initial values
  (Carbonnelle & De Vleeschouwer 2018, "Layer rotation"; their tools measure the kernels of
  dense and convolutional layers only, so norm gains and biases are left out);
- `spectral_norm/<matrix>`: the largest singular value of each weight matrix of the block, by
  power iteration warm-started from the previous evaluation's vectors.

Hidden features (per block l, on the probe batch, `mlp_features`: the input of the block's MLP
down projection, its hidden layer after the activation, one vector a per token):
- `feature_norm`: ||a||_1, and `negative_aware_norm`: ||a||_1 / ||a||_0 with ||a||_0 the number
  of positive units, each the mean over tokens (Park, Chai, Yoon and Teoh 2023, "Understanding
  the Feature Norm for Out-of-Distribution Detection", ICCV, arXiv:2310.05316, Eq. 9-10: the
  feature norm is the confidence of a classifier hidden in the layer; NAN adds the deactivated
  units). The paper scores the last hidden layer of image classifiers with ReLU (a >= 0); here
  every block's MLP of a language model is scored per token, and with GELU, SiLU or SwiGLU the
  features are signed: ||a||_1 sums their magnitudes and ||a||_0 counts the units above 0, as
  Eq. 9 writes it (d minus the units at or below 0).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import pairwise
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.methods.layers import blocks, sublayer
from harness.records import LayerStat


def whole(tensor: Tensor) -> Tensor:
    """A tensor in full: an FSDP-sharded parameter (a DTensor) gathered from every rank (a
    collective: every rank calls it), any other tensor as it is."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


NEIGHBOURS = 16
"""Tokens in each token's neighbourhood when fitting its tokenwise map."""
MAX_TOKENS = 512
"""Probe tokens used by the tokenwise fit (its cost is quadratic in them): the first ones."""
POWER_ITERATIONS = 30
"""Most power iterations per matrix and evaluation (warm starts converge in a few)."""
POWER_TOLERANCE = 1e-6
"""Relative change of the estimate below which the power iteration stops."""


def effective_rank(matrix: Tensor) -> float:
    """exp(H(p)) with p_k = s_k / sum(s) the normalised singular values of `matrix` and H the
    Shannon entropy (Roy & Vetterli 2007, "The effective rank: a measure of effective
    dimensionality", EUSIPCO): k for k equal nonzero singular values, near min(n, d) for an
    isotropic Gaussian n x d matrix."""
    singular = torch.linalg.svdvals(matrix.double())
    if singular.sum() == 0:
        return 0.0  # no direction at all: an all-zero output
    p = singular / singular.sum()
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


def tokenwise_share(inputs: Tensor, outputs: Tensor, neighbours: int = NEIGHBOURS) -> float:
    """The share of the update `outputs - inputs` (tokens as rows) captured by its tokenwise
    component (Yoo 2026, arXiv:2604.02459): the transition h_out = T(h_in) + r is split into a
    per-token map T(x_i) = A(x_i) x_i, fitted locally on the k nearest neighbours of x_i in the
    input space within a restricted class (here the paper's diagonal maps, by least squares per
    channel), and the residual r that class cannot capture. Returns 1 - ||r||^2 / ||Δ||^2
    with Δ = h_out - h_in (the residual of h_out equals that of the update, as the identity
    is diagonal): 1 when every update is tokenwise, 0 or less when none of it is; NaN for a
    block that does not change its input (no update to share out)."""
    x, y = inputs[:MAX_TOKENS].double(), outputs[:MAX_TOKENS].double()
    k = min(neighbours, x.shape[0])
    nearest = torch.cdist(x, x).topk(k, largest=False).indices  # (n, k), itself included
    xs, ys = x[nearest], y[nearest]  # (n, k, d)
    diagonal = (xs * ys).sum(1) / (xs.square().sum(1) + torch.finfo(x.dtype).eps)
    residual = y - diagonal * x
    update = y - x
    energy = update.square().sum()
    if energy == 0:
        return float("nan")
    return float(1.0 - residual.square().sum() / energy)


def representation_stats(hidden: Sequence[Tensor], step: int) -> list[LayerStat]:
    """Effective rank of each block's output and the tokenwise share of each block's update,
    from the embedding output and block outputs (`harness.diagnostics.hidden_states`)."""
    stats = []
    for layer, (h_in, h_out) in enumerate(pairwise(hidden)):
        x, y = h_in.flatten(0, -2), h_out.flatten(0, -2)
        stats += [
            LayerStat(step, layer, "effective_rank", effective_rank(y)),
            LayerStat(step, layer, "tokenwise_share", tokenwise_share(x, y)),
        ]
    return stats


def negative_aware_norm(features: Tensor) -> float:
    """Park et al. 2023's NAN, ||a||_1 / ||a||_0 (Eq. 10), averaged over the rows of `features`
    (one feature vector a per row); a row without a positive unit counts ||a||_0 as 1."""
    active = (features > 0).sum(-1).clamp(min=1)
    return float((features.abs().sum(-1) / active).mean())


@contextmanager
def mlp_features(model: nn.Module) -> Iterator[dict[int, Tensor]]:
    """Collects, during the forward passes inside it, each block's MLP hidden features (the
    input of its `down_proj`) by block index, tokens as rows; nothing for a model of no known
    layout or a block whose MLP has no down projection (a pruned sublayer)."""
    features: dict[int, Tensor] = {}
    try:
        count = len(blocks(model))
    except TypeError:
        count = 0
    handles = []
    for index in range(count):
        down = getattr(sublayer(model, index, "mlp"), "down_proj", None)
        if isinstance(down, nn.Module):

            def keep(_: nn.Module, args: tuple[Any, ...], index: int = index) -> None:
                features[index] = args[0].detach().float().flatten(0, -2)

            handles.append(down.register_forward_pre_hook(keep))
    try:
        yield features
    finally:
        for handle in handles:
            handle.remove()


def feature_norm_stats(features: dict[int, Tensor], step: int) -> list[LayerStat]:
    """`feature_norm` and `negative_aware_norm` of each block's MLP hidden features."""
    stats = []
    for layer, a in sorted(features.items()):
        stats += [
            LayerStat(step, layer, "feature_norm", float(a.abs().sum(-1).mean())),
            LayerStat(step, layer, "negative_aware_norm", negative_aware_norm(a)),
        ]
    return stats


def cosine_distance(current: Sequence[Tensor], initial: Sequence[Tensor]) -> float:
    """1 - cos(w, w0) of the concatenated tensors (Carbonnelle & De Vleeschouwer 2018)."""
    w = torch.cat([t.detach().flatten().double() for t in current])
    w0 = torch.cat([t.flatten().double() for t in initial])
    return float(1.0 - F.cosine_similarity(w, w0, dim=0))


def kernels(layer: nn.Module) -> list[Tensor]:
    """The weight matrices of a layer (parameters of two or more dimensions), whole where they
    are sharded: what layer rotation measures."""
    return [whole(p) for p in layer.parameters() if p.ndim >= 2]


def spectral_norm(matrix: Tensor, start: Tensor) -> tuple[float, Tensor]:
    """The largest singular value of `matrix` by power iteration on M^T M from `start` (a
    right vector), and the vector it ends at, to warm-start the next evaluation."""
    m = matrix.detach().float()
    v = start / start.norm()
    estimate = 0.0
    for _ in range(POWER_ITERATIONS):
        u = m @ v
        w = m.T @ u
        norm = float(w.norm())
        if norm == 0.0:
            return 0.0, v
        v = w / norm
        previous, estimate = estimate, float(u.norm())
        if abs(estimate - previous) <= POWER_TOLERANCE * estimate:
            break
    return float((m @ v).norm()), v


class WeightTracker:
    """Layer rotation and spectral norms of a run's blocks across evaluations: it keeps the
    weights at creation (step 0) and each matrix's last power-iteration vector."""

    def __init__(self, layers: Sequence[nn.Module], seed: int = 0) -> None:
        self.layers = layers
        self.initial = [[p.detach().clone() for p in kernels(layer)] for layer in layers]
        generator = torch.Generator().manual_seed(seed)
        self.vectors = {
            (index, name): torch.randn(p.shape[1], generator=generator).to(p.device)
            for index, layer in enumerate(layers)
            for name, p in layer.named_parameters()
            if p.ndim == 2
        }

    def state_dict(self) -> dict[str, Any]:
        """The weights at creation and the power-iteration vectors (a checkpoint's part, so a
        resumed trial measures rotation from its real start and continues the iteration)."""
        vectors = {f"{index}/{name}": vector for (index, name), vector in self.vectors.items()}
        return {"initial": self.initial, "vectors": vectors}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores `state_dict()`'s tensors onto the devices of the weights they belong to (a
        checkpoint is read onto the CPU)."""
        self.initial = [
            [saved.to(p.device) for saved, p in zip(tensors, kernels(layer), strict=True)]
            for tensors, layer in zip(state["initial"], self.layers, strict=True)
        ]
        for key, vector in state["vectors"].items():
            index, _, name = key.partition("/")
            device = self.vectors[int(index), name].device
            self.vectors[int(index), name] = vector.to(device)

    @torch.no_grad()
    def stats(self, step: int) -> list[LayerStat]:
        stats = []
        for index, layer in enumerate(self.layers):
            rotation = cosine_distance(kernels(layer), self.initial[index])
            stats.append(LayerStat(step, index, "layer_rotation", rotation))
            for name, p in layer.named_parameters():
                if p.ndim == 2:
                    value, self.vectors[index, name] = spectral_norm(
                        whole(p), self.vectors[index, name]
                    )
                    stats.append(LayerStat(step, index, f"spectral_norm/{name}", value))
        return stats
