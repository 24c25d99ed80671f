"""Normalization placements (SPEC 5.1), each registered by name in NORM_PLACEMENTS.

A placement is the residual wiring of one transformer block: it owns the block's norms and
combines the block's two sublayers (attention, MLP), which it receives as callables. It is
built as `Cls(layer_idx, n_layers, make_norm, **params)`; `make_norm()` returns a fresh norm
over the model width, and `params` are the validated fields of its `params=` model, if any.
`final_norm` is the placement's default for a norm after the last block.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from torch import Tensor, nn

from harness.registry import NORM_PLACEMENTS

MakeNorm = Callable[[], nn.Module]
Sublayer = Callable[[Tensor], Tensor]


class Placement(nn.Module):
    """Base class: where a block's norms sit around its attention and MLP sublayers."""

    final_norm: ClassVar[bool]

    def __init__(self, layer_idx: int, n_layers: int) -> None:
        super().__init__()
        self.layer_idx, self.n_layers = layer_idx, n_layers

    def forward(self, x: Tensor, attn: Sublayer, mlp: Sublayer) -> Tensor:
        raise NotImplementedError


@NORM_PLACEMENTS.register("pre")
class PreNorm(Placement):
    """Pre-LN: x + f(N(x)) (Xiong et al., 2020, "On Layer Normalization in the Transformer")."""

    final_norm = True

    def __init__(self, layer_idx: int, n_layers: int, make_norm: MakeNorm) -> None:
        super().__init__(layer_idx, n_layers)
        self.norm1, self.norm2 = make_norm(), make_norm()

    def forward(self, x: Tensor, attn: Sublayer, mlp: Sublayer) -> Tensor:
        x = x + attn(self.norm1(x))
        return x + mlp(self.norm2(x))


@NORM_PLACEMENTS.register("post")
class PostNorm(Placement):
    """Post-LN: N(x + f(x)) (Vaswani et al., 2017, "Attention Is All You Need")."""

    final_norm = False

    def __init__(self, layer_idx: int, n_layers: int, make_norm: MakeNorm) -> None:
        super().__init__(layer_idx, n_layers)
        self.norm1, self.norm2 = make_norm(), make_norm()

    def forward(self, x: Tensor, attn: Sublayer, mlp: Sublayer) -> Tensor:
        x = self.norm1(x + attn(x))
        return self.norm2(x + mlp(x))
