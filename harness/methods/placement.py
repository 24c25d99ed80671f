"""Normalization placements (SPEC 5.1), each registered by name in NORM_PLACEMENTS.

A placement is the residual wiring of one transformer block: it owns the block's norms and
combines the block's two sublayers (attention, MLP), which it receives as callables. It is
built as `Cls(layer_idx, n_layers, make_norm, **params)`; `make_norm(role)` returns a fresh
norm over the model width for the attention path ("attn") or the MLP path ("mlp"), and
`params` are the validated fields of its `params=` model, if any. `final_norm` is the
placement's default for a norm after the last block. A placement that changes the inside of
the sublayers declares it in `sublayers` (the model builds them so), and one that changes
their initialisation overrides `init_sublayers` (the model calls it after its own init).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor, nn
from transformers import initialization as init

from harness.methods.norms import NormRole

MakeNorm = Callable[[NormRole], nn.Module]
Sublayer = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class SublayerNorms:
    """What a placement adds inside the attention and MLP sublayers."""

    qkv_norm: bool = False
    """Normalize each head's query, key and value over the head dimension (HybridNorm)."""
    head_scale: bool = False
    """A learnable gain per attention head, before the output projection (NormFormer)."""
    ffn_norm: bool = False
    """A norm after the MLP's first linear layer and activation (NormFormer)."""


class Placement(nn.Module):
    """Base class: where a block's norms sit around its attention and MLP sublayers."""

    final_norm: ClassVar[bool]
    sublayers: ClassVar[SublayerNorms] = SublayerNorms()

    def __init__(self, layer_idx: int, n_layers: int) -> None:
        super().__init__()
        self.layer_idx, self.n_layers = layer_idx, n_layers

    def forward(self, x: Tensor, attn: Sublayer, mlp: Sublayer) -> Tensor:
        raise NotImplementedError

    def init_sublayers(self, attn: nn.Module, mlp: nn.Module) -> None:
        """Re-initialise the sublayers' weights after the model's own init (most keep it)."""


def pre_ln(x: Tensor, attn: Sublayer, mlp: Sublayer, norm1: nn.Module, norm2: nn.Module) -> Tensor:
    """x + f(N(x)) for both sublayers."""
    x = x + attn(norm1(x))
    return x + mlp(norm2(x))


def post_ln(x: Tensor, attn: Sublayer, mlp: Sublayer, norm1: nn.Module, norm2: nn.Module) -> Tensor:
    """N(x + f(x)) for both sublayers."""
    x = norm1(x + attn(x))
    return norm2(x + mlp(x))


class PreNorm(Placement):
    """Pre-LN: x + f(N(x)) (Xiong et al., 2020, "On Layer Normalization in the Transformer")."""

    final_norm = True

    def __init__(self, layer_idx: int, n_layers: int, make_norm: MakeNorm) -> None:
        super().__init__(layer_idx, n_layers)
        self.norm1, self.norm2 = make_norm("attn"), make_norm("mlp")

    def forward(self, x: Tensor, attn: Sublayer, mlp: Sublayer) -> Tensor:
        return pre_ln(x, attn, mlp, self.norm1, self.norm2)


class PostNorm(Placement):
    """Post-LN: N(x + f(x)) (Vaswani et al., 2017, "Attention Is All You Need")."""

    final_norm = False

    def __init__(self, layer_idx: int, n_layers: int, make_norm: MakeNorm) -> None:
        super().__init__(layer_idx, n_layers)
        self.norm1, self.norm2 = make_norm("attn"), make_norm("mlp")

    def forward(self, x: Tensor, attn: Sublayer, mlp: Sublayer) -> Tensor:
        return post_ln(x, attn, mlp, self.norm1, self.norm2)


class PeriNorm(Placement):
    """Peri-LN: x + N_out(f(N_in(x))) (Kim et al., 2025, "Peri-LN: Revisiting Normalization")."""

    final_norm = True

    def __init__(self, layer_idx: int, n_layers: int, make_norm: MakeNorm) -> None:
        super().__init__(layer_idx, n_layers)
        self.attn_in, self.attn_out = make_norm("attn"), make_norm("attn")
        self.mlp_in, self.mlp_out = make_norm("mlp"), make_norm("mlp")

    def forward(self, x: Tensor, attn: Sublayer, mlp: Sublayer) -> Tensor:
        x = x + self.attn_out(attn(self.attn_in(x)))
        return x + self.mlp_out(mlp(self.mlp_in(x)))


class MixNorm(Placement):
    """Mix-LN: Post-LN in the first post_fraction of layers, Pre-LN after (Li et al., 2025)."""

    final_norm = True

    def __init__(
        self, layer_idx: int, n_layers: int, make_norm: MakeNorm, post_fraction: float
    ) -> None:
        super().__init__(layer_idx, n_layers)
        self.post = layer_idx < math.floor(post_fraction * n_layers)
        self.norm1, self.norm2 = make_norm("attn"), make_norm("mlp")

    def forward(self, x: Tensor, attn: Sublayer, mlp: Sublayer) -> Tensor:
        wiring = post_ln if self.post else pre_ln
        return wiring(x, attn, mlp, self.norm1, self.norm2)


class HybridNorm(Placement):
    """HybridNorm: x' = x + attn_QKV-norm(x); h = N(x'); h + FFN(h) (Zhuo et al., 2025)."""

    final_norm = True
    sublayers = SublayerNorms(qkv_norm=True)

    def __init__(self, layer_idx: int, n_layers: int, make_norm: MakeNorm) -> None:
        super().__init__(layer_idx, n_layers)
        self.norm = make_norm("mlp")

    def forward(self, x: Tensor, attn: Sublayer, mlp: Sublayer) -> Tensor:
        x = self.norm(x + attn(x))
        return x + mlp(x)


class NormFormer(Placement):
    """NormFormer: x + N(HeadScaleMHA(N(x))); x + W2 N(act(W1 N(x))) (Shleifer et al., 2021)."""

    final_norm = True
    sublayers = SublayerNorms(head_scale=True, ffn_norm=True)

    def __init__(self, layer_idx: int, n_layers: int, make_norm: MakeNorm) -> None:
        super().__init__(layer_idx, n_layers)
        self.attn_in, self.attn_out = make_norm("attn"), make_norm("attn")
        self.mlp_in = make_norm("mlp")

    def forward(self, x: Tensor, attn: Sublayer, mlp: Sublayer) -> Tensor:
        x = x + self.attn_out(attn(self.attn_in(x)))
        return x + mlp(self.mlp_in(x))


class LayerNormScaling(Placement):
    """LNS: x + f(N(x) / sqrt(l)), l = layer index from 1 (Sun et al., 2025, "Curse of Depth")."""

    final_norm = True

    def __init__(self, layer_idx: int, n_layers: int, make_norm: MakeNorm) -> None:
        super().__init__(layer_idx, n_layers)
        self.norm1, self.norm2 = make_norm("attn"), make_norm("mlp")
        self.scale = 1.0 / math.sqrt(layer_idx + 1)

    def forward(self, x: Tensor, attn: Sublayer, mlp: Sublayer) -> Tensor:
        x = x + attn(self.scale * self.norm1(x))
        return x + mlp(self.scale * self.norm2(x))


class DeepNorm(Placement):
    """DeepNorm: N(alpha x + f(x)), alpha=(2L)^(1/4), init gain (8L)^(-1/4) (Wang et al., 2022)."""

    final_norm = False

    def __init__(self, layer_idx: int, n_layers: int, make_norm: MakeNorm) -> None:
        super().__init__(layer_idx, n_layers)
        self.norm1, self.norm2 = make_norm("attn"), make_norm("mlp")
        self.alpha = (2 * n_layers) ** 0.25
        self.beta = (8 * n_layers) ** -0.25

    def forward(self, x: Tensor, attn: Sublayer, mlp: Sublayer) -> Tensor:
        x = self.norm1(self.alpha * x + attn(x))
        return self.norm2(self.alpha * x + mlp(x))

    def init_sublayers(self, attn: nn.Module, mlp: nn.Module) -> None:
        """Xavier-normal weights: gain beta for the FFN, value and output projections, else 1."""
        for name, module in [*attn.named_modules(), *mlp.named_modules()]:
            if isinstance(module, nn.Linear):
                gain = 1.0 if name in ("q_proj", "k_proj") else self.beta
                init.xavier_normal_(module.weight, gain=gain)


class NoNorm(Placement):
    """No norms: x + f(x), a plain residual block (He et al., 2016, "Deep Residual Learning")."""

    final_norm = False

    def __init__(self, layer_idx: int, n_layers: int, make_norm: MakeNorm) -> None:
        super().__init__(layer_idx, n_layers)

    def forward(self, x: Tensor, attn: Sublayer, mlp: Sublayer) -> Tensor:
        x = x + attn(x)
        return x + mlp(x)
