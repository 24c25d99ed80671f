"""Normalization types (SPEC 5.2), each declared by name in harness/methods/catalog.py.

An entry is a factory `(dim, role, eps, **params) -> nn.Module` that normalizes the last
dimension. `role` says where the norm sits: "attn" on the attention sublayer's path, "mlp" on
the MLP's, "final" before the LM head ("embed" after the embeddings, for placements that
normalize them); only types whose initialisation depends on it read it (DyT and Derf: their
language-model alpha). Types with their own fields (e.g. an initial alpha) declare a
`ParamsModel` as `params=` in the catalog; the model passes the validated fields of the
suite's `norm` section
as `**params`. Types declared with `scale_embeddings=True` follow their papers' language-model
recipe: the model multiplies its embeddings by a learnable scalar initialised to sqrt(d_model).
Types declared with `model_width=True` also get the model's width as `model_width` (their
alpha_0 depends on it, not on the width of the tensor they normalize).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import Tensor, nn

NormRole = Literal["attn", "mlp", "final", "embed"]

DYT_LLM_ALPHA: tuple[tuple[int, float, float], ...] = (
    (1024, 1.0, 1.0),
    (2048, 1.0, 0.5),
    (4096, 0.8, 0.2),
    (5120, 0.6, 0.15),
)
"""(width up to, alpha_0 of attention norms, alpha_0 of the other norms), from DyT's alpha_0
study for LLaMA (Zhu et al., 2025, Sec. 7; 7B and 13B configurations of the official code)."""
DYT_LLM_ALPHA_WIDEST = (0.2, 0.05)
"""alpha_0 (attention, other) above the widest row: DyT's LLaMA 34B and 70B (width 8192)."""


def llm_alpha_init(width: int, role: NormRole) -> float:
    """DyT's alpha_0 for language models: smaller for wider models, larger in attention.

    `width` is the model's width (d_model), for every norm of the model: the authors' LLaMA
    code (github.com/jiachenzhu/DyT, other_tasks/LLaMA/README.md and fms_fsdp/models/llama.py)
    sets one alpha_0 per model variant for the attention norms, one for the FFN norms and one
    for the final norm, whatever tensor each normalizes.
    """
    attn, other = next(
        ((attn, other) for up_to, attn, other in DYT_LLM_ALPHA if width <= up_to),
        DYT_LLM_ALPHA_WIDEST,
    )
    return attn if role == "attn" else other


def layernorm(dim: int, role: NormRole, eps: float) -> nn.Module:
    """LayerNorm: (x - mean) / sqrt(var + eps) * g + b (Ba et al., 2016, "Layer Normalization")."""
    return nn.LayerNorm(dim, eps=eps)


def rmsnorm(dim: int, role: NormRole, eps: float) -> nn.Module:
    """RMSNorm: x / sqrt(mean(x^2) + eps) * g (Zhang & Sennrich, 2019, "Root Mean Square LN")."""
    return nn.RMSNorm(dim, eps=eps)


class PointwiseNorm(nn.Module):
    """gamma * f(alpha x + ...) + beta: a point-wise function in place of a norm."""

    def __init__(self, dim: int, alpha_init: float) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.full((1,), alpha_init))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))


class DynamicTanh(PointwiseNorm):
    """DyT(x) = gamma * tanh(alpha x) + beta, alpha a learnable scalar."""

    def forward(self, x: Tensor) -> Tensor:
        return self.weight * torch.tanh(self.alpha * x) + self.bias


class DynamicErf(PointwiseNorm):
    """Derf(x) = gamma * erf(alpha x + s) + beta, alpha and s learnable scalars."""

    def __init__(self, dim: int, alpha_init: float, shift_init: float) -> None:
        super().__init__(dim, alpha_init)
        self.shift = nn.Parameter(torch.full((1,), shift_init))

    def forward(self, x: Tensor) -> Tensor:
        return self.weight * torch.erf(self.alpha * x + self.shift) + self.bias


def dyt(
    dim: int, role: NormRole, eps: float, alpha_init: float | None, model_width: int | None = None
) -> nn.Module:
    """DyT: gamma tanh(alpha x) + beta (Zhu et al., 2025, "Transformers without Normalization").

    alpha_0 by the model's width (`model_width`, default `dim`) and the norm's role.
    """
    width = dim if model_width is None else model_width
    return DynamicTanh(dim, llm_alpha_init(width, role) if alpha_init is None else alpha_init)


def derf(
    dim: int,
    role: NormRole,
    eps: float,
    alpha_init: float | None,
    shift_init: float,
    model_width: int | None = None,
) -> nn.Module:
    """Derf: gamma erf(alpha x + s) + beta (Chen et al., 2025, "Stronger Normalization-Free").

    Derf's own module defaults to alpha_0 = 0.5 (github.com/zlab-princeton/Derf, ViT/, DiT/,
    "DNA model/dynamic_erf.py"), but its language-model recipe ("language model/model_derf.patch"
    on nanoGPT) sets alpha_0 per role (attention, FFN, final norm; 1.0 each by default, the
    README leaves them to be chosen) and scales the embeddings by a learnable sqrt(d): the same
    per-role, per-width rule as DyT's language models (`llm_alpha_init`), which gives 1.0 for
    every role up to width 1024, as the patch does.
    """
    width = dim if model_width is None else model_width
    alpha = llm_alpha_init(width, role) if alpha_init is None else alpha_init
    return DynamicErf(dim, alpha, shift_init)


class ScaleNorm(nn.Module):
    """g * x / max(||x||, eps), one learnable scalar g initialised to sqrt(d)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.full((1,), math.sqrt(dim)))

    def forward(self, x: Tensor) -> Tensor:
        length: Tensor = x.norm(dim=-1, keepdim=True)
        return x * (self.scale / length.clamp(min=self.eps))


def scalenorm(dim: int, role: NormRole, eps: float) -> nn.Module:
    """ScaleNorm: g x / ||x||, g = sqrt(d) at init (Nguyen & Salazar, 2019, arXiv:1910.05895)."""
    return ScaleNorm(dim, eps)


class CRMSNorm(nn.Module):
    """x / sqrt((sum x_i^2 + (sum x_i)^2) / (d + 1) + eps) * g.

    x in R^d is the lossless compression of a zero-mean vector in R^(d+1) (its last element,
    -sum x_i, dropped); this is the RMSNorm of that vector, restricted to the kept elements.
    """

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        squares = x.square().sum(-1, keepdim=True) + x.sum(-1, keepdim=True).square()
        return x * torch.rsqrt(squares / (x.shape[-1] + 1) + self.eps) * self.weight


def crmsnorm(dim: int, role: NormRole, eps: float) -> nn.Module:
    """CRMSNorm: RMSNorm of the zero-mean (d+1)-vector x encodes (Jiang et al., 2023, CRMSNorm)."""
    return CRMSNorm(dim, eps)


class SeeDNorm(nn.Module):
    """[tanh(x . beta) * alpha + gamma] * x / RMS(x); beta = 0 at init, so it starts as RMSNorm."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(dim))
        self.alpha = nn.Parameter(torch.ones(dim))
        self.beta = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        normed = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps)
        gain = torch.tanh(x @ self.beta).unsqueeze(-1) * self.alpha + self.gamma
        return gain * normed


def seednorm(dim: int, role: NormRole, eps: float) -> nn.Module:
    """SeeDNorm: [tanh(x.beta) alpha + gamma] x / RMS(x) (Cai et al., 2025, "SeeDNorm")."""
    return SeeDNorm(dim, eps)


def identity(dim: int, role: NormRole, eps: float) -> nn.Module:
    """Identity: N(x) = x, the no-normalization baseline (Zhu et al., 2025, "w/o Normalization")."""
    return nn.Identity()
