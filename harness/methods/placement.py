"""Normalization placements (SPEC 5.1), each registered by name in NORM_PLACEMENTS.

A placement is the residual wiring of one transformer block: it owns the block's norms and
combines the block's two sublayers (attention, MLP), which it receives as callables. It is
built as `Cls(layer_idx, n_layers, make_norm, **params)`; `make_norm(role)` returns a fresh
norm over the model width for the attention path ("attn") or the MLP path ("mlp"), and
`params` are the validated fields of its `params=` model, if any. `final_norm` is the
placement's default for a norm after the last block, `embed_norm` its default for a norm of the
embeddings before the first block, and `paper_init` the initialisation its authors trained
with (`model.init: paper`; GPT-2's where they used it or name none). A placement that changes
the inside of the sublayers declares it in `sublayers` (the model builds them so), and one that
changes their initialisation overrides `init_sublayers` (the model calls it after its own init).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor, nn

from harness.methods.norms import NormRole
from harness.registry import NORM_PLACEMENTS
from harness.spec.sections import InitProfile

MakeNorm = Callable[[NormRole], nn.Module]
Sublayer = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class InitRecipe:
    """How the model initialises its weights: normal(0, init_std) for every linear layer and
    embedding (the GPT-2 / nanoGPT recipe), with or without GPT-2's residual scaling."""

    residual_scaling: bool = True
    """Divide the std of the layers writing into the residual stream (attention output and MLP
    down projections) by sqrt(2 n_layers) (Radford et al., 2019, GPT-2, Sec. 2.3)."""


GPT2_INIT = InitRecipe()
UNSCALED_INIT = InitRecipe(residual_scaling=False)
"""std init_std on every linear layer and embedding, no residual scaling: the init the
LayerNorm Scaling and Mix-LN authors trained with (github.com/lmsdss/LayerNorm-Scaling,
peft_pretraining/modeling_llama.py, `LlamaPreTrainedModel._init_weights`: normal(0,
initializer_range = 0.02) for every nn.Linear and nn.Embedding; the scaled std
initializer_range / sqrt(2 L) only for the `scale_pre` / `scale_post_pre` baselines, not for
`LNS` or `post_pre` = Mix-LN; its README advises against combining LNS with scaled init)."""


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
    embed_norm: ClassVar[bool] = False
    sublayers: ClassVar[SublayerNorms] = SublayerNorms()
    paper_init: ClassVar[InitRecipe] = GPT2_INIT

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
    """Peri-LN: x + N_out(f(N_in(x))) (Kim et al., 2025, "Peri-LN: Revisiting Normalization").

    Kim et al., arXiv:2502.02732, Sec. 3, eq. 3, with the final norm y_L = N(x_L) and the
    embedding norm y_0 = N(x_embed) that the paper adds to Peri-LN (marked optional there; on
    by default here, `norm.embed_norm: false` turns it off).
    """

    final_norm = True
    embed_norm = True

    def __init__(self, layer_idx: int, n_layers: int, make_norm: MakeNorm) -> None:
        super().__init__(layer_idx, n_layers)
        self.attn_in, self.attn_out = make_norm("attn"), make_norm("attn")
        self.mlp_in, self.mlp_out = make_norm("mlp"), make_norm("mlp")

    def forward(self, x: Tensor, attn: Sublayer, mlp: Sublayer) -> Tensor:
        x = x + self.attn_out(attn(self.attn_in(x)))
        return x + self.mlp_out(mlp(self.mlp_in(x)))


class MixNorm(Placement):
    """Mix-LN: Post-LN in the first post_fraction of layers, Pre-LN after (Li et al., 2025).

    As `post_pre` in github.com/lmsdss/LayerNorm-Scaling, peft_pretraining/modeling_llama.py,
    whose init (`paper_init`) has no residual scaling.
    """

    final_norm = True
    paper_init = UNSCALED_INIT

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
    """LNS: x + f(N(x) / sqrt(l)), l = layer index from 1 (Sun et al., 2025, "Curse of Depth").

    As `LNS` in github.com/lmsdss/LayerNorm-Scaling, peft_pretraining/modeling_llama.py, whose
    init (`paper_init`) has no residual scaling.
    """

    final_norm = True
    paper_init = UNSCALED_INIT

    def __init__(self, layer_idx: int, n_layers: int, make_norm: MakeNorm) -> None:
        super().__init__(layer_idx, n_layers)
        self.norm1, self.norm2 = make_norm("attn"), make_norm("mlp")
        self.scale = 1.0 / math.sqrt(layer_idx + 1)

    def forward(self, x: Tensor, attn: Sublayer, mlp: Sublayer) -> Tensor:
        x = x + attn(self.scale * self.norm1(x))
        return x + mlp(self.scale * self.norm2(x))


class DeepNorm(Placement):
    """DeepNorm: N(alpha x + f(x)), alpha=(2L)^(1/4), init gain (8L)^(-1/4) (Wang et al., 2022).

    Its own init (`init_sublayers`) is part of the method: it replaces the sublayers' init under
    both `model.init` profiles.
    """

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
                nn.init.xavier_normal_(module.weight, gain=gain)


class NoNorm(Placement):
    """No norms: x + f(x), a plain residual block (He et al., 2016, "Deep Residual Learning")."""

    final_norm = False

    def __init__(self, layer_idx: int, n_layers: int, make_norm: MakeNorm) -> None:
        super().__init__(layer_idx, n_layers)

    def forward(self, x: Tensor, attn: Sublayer, mlp: Sublayer) -> Tensor:
        x = x + attn(x)
        return x + mlp(x)


def init_recipe(placement: str, profile: InitProfile) -> InitRecipe:
    """The model init of `profile`: GPT-2's, the placement's authors' (`paper_init`), or
    `unscaled` for every placement (the LayerNorm Scaling and Mix-LN authors trained their Pre-LN
    and Post-LN baselines with it too: see UNSCALED_INIT)."""
    if profile == "unscaled":
        return UNSCALED_INIT
    return NORM_PLACEMENTS.get(placement).paper_init if profile == "paper" else GPT2_INIT
