"""The built-in decoder-only transformer (SPEC 3), in plain PyTorch.

nanoGPT-style and small: token (and optionally learned position) embeddings, `n_layers` blocks
whose norms are arranged by a registered placement (SPEC 5.1) and built from a registered norm
type (SPEC 5.2), an optional final norm and a (tied) LM head.

`GPT` is an `nn.Module` and `GPTConfig` a dataclass, so that a trial trains it without importing
transformers (half a second in every fork server, Ray worker and Slurm job; its model stack
seconds more, with hqq and torchao installed torch's compiler too). Its
`transformers.PreTrainedModel` face, `harness.models.gpt_hf.GPTForCausalLM` (`save_pretrained`,
`AutoModelForCausalLM.from_pretrained`, `generate`, lm-eval's `hf` backend), wraps the same
modules, with a `PreTrainedConfig` that is also a `GPTConfig`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import Field, dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.methods.norms import NormRole
from harness.methods.placement import SublayerNorms, init_recipe
from harness.models.catalog import GPTSpec, check_heads, default_d_ff
from harness.registry import NORM_PLACEMENTS, NORM_TYPES
from harness.spec.recipe import ModelNorm
from harness.spec.sections import NormSpec

ROPE_BASE = 10000.0
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "swiglu": F.silu,
    "gelu": F.gelu,
    "relu": F.relu,
}

NormFactory = Callable[[int, NormRole], nn.Module]
Rope = tuple[Tensor, Tensor]
T = TypeVar("T")


MODEL_TYPE = "layerbench-gpt"
TRANSFORMERS_NAMES = {
    "hidden_size": "d_model",
    "num_hidden_layers": "n_layers",
    "num_attention_heads": "n_heads",
    "num_key_value_heads": "n_kv_heads",
    "intermediate_size": "d_ff",
    "max_position_embeddings": "max_seq_len",
    "tie_word_embeddings": "tie_embeddings",
    "initializer_range": "init_std",
}
"""transformers' names of `GPTConfig` fields (its `attribute_map`), which methods that work on any
causal LM read and write, e.g. layer pruning's `num_hidden_layers`."""


def norm_field(name: str) -> str:
    """`GPTConfig`'s name of a `NormSpec` field: `norm_` before a name that does not say norm
    (`norm_type`, `norm_eps`; `qk_norm` as it is)."""
    return name if "norm" in name else f"norm_{name}"


def spec_fields(cls: type[T]) -> type[T]:
    """`cls` as a keyword-only dataclass with, besides its own fields, every `GPTSpec` field but
    `type` and every `NormSpec` field (named by `norm_field`), their annotations and defaults
    taken from the two models, so the three never disagree."""
    derived = [(name, info) for name, info in GPTSpec.model_fields.items() if name != "type"]
    derived += [(norm_field(name), info) for name, info in NormSpec.model_fields.items()]
    for name, info in derived:
        cls.__annotations__[name] = info.rebuild_annotation()
        setattr(cls, name, info.default)
    return dataclass(kw_only=True)(cls)


@spec_fields
class GPTConfig:
    """Configuration of `GPT`: the `GPTSpec` fields, the vocabulary and the norm settings (the
    `NormSpec` fields and the placement's and norm type's validated parameters: `ModelNorm`),
    derived from those models by `spec_fields`; each field is also readable and writable under
    its transformers name (`TRANSFORMERS_NAMES`)."""

    vocab_size: int = 256
    placement_params: dict[str, Any] = field(default_factory=dict)
    norm_type_params: dict[str, Any] = field(default_factory=dict)
    output_hidden_states: bool = False

    if TYPE_CHECKING:

        def __init__(self, **fields: Any) -> None: ...

        __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    def __post_init__(self) -> None:
        """Check the heads; fill in what the sections leave to the model (None)."""
        check_heads(self.d_model, self.n_heads, self.n_kv_heads, self.pos)
        placement = NORM_PLACEMENTS.get(self.norm_placement)
        defaults = {
            "n_kv_heads": self.n_heads,
            "d_ff": default_d_ff(self.d_model, self.mlp),
            "final_norm": placement.final_norm,
            "embed_norm": placement.embed_norm,
        }
        for name, default in defaults.items():
            if getattr(self, name) is None:
                setattr(self, name, default)

    @classmethod
    def of(cls, spec: GPTSpec, norm: ModelNorm, vocab_size: int) -> GPTConfig:
        """The configuration of a model section and a validated norm section."""
        norm_fields = {norm_field(name): getattr(norm.spec, name) for name in NormSpec.model_fields}
        return cls(
            **spec.model_dump(exclude={"type"}),
            **norm_fields,
            vocab_size=vocab_size,
            placement_params=norm.placement_params,
            norm_type_params=norm.type_params,
        )

    def __getattr__(self, name: str) -> Any:
        """A field under its transformers name (called only when no attribute has `name`)."""
        if name in TRANSFORMERS_NAMES:
            return getattr(self, TRANSFORMERS_NAMES[name])
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(TRANSFORMERS_NAMES.get(name, name), value)


def rope_tables(seq_len: int, head_dim: int, device: torch.device) -> Rope:
    """cos and sin of the rotary angles, (seq_len, head_dim) (Su et al., 2021, RoFormer)."""
    inv_freq = ROPE_BASE ** (-torch.arange(0, head_dim, 2, device=device) / head_dim)
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: Tensor, rope: Rope) -> Tensor:
    """Rotate the two halves of each head's features (the Llama / GPT-NeoX layout)."""
    cos, sin = rope
    x1, x2 = x.chunk(2, dim=-1)
    return (x * cos + torch.cat((-x2, x1), dim=-1) * sin).to(x.dtype)


def padding_mask(attention_mask: Tensor) -> Tensor:
    """Causal boolean mask (batch, 1, T, T) hiding padded keys; a padded query sees itself."""
    seq_len = attention_mask.shape[-1]
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool, device=attention_mask.device).tril()
    mask = causal & attention_mask.bool()[:, None, None, :]
    return mask | torch.eye(seq_len, dtype=torch.bool, device=mask.device)


class ResidualOut(nn.Linear):
    """A linear layer writing into the residual stream; GPT-2 scales its init std down."""


class Attention(nn.Module):
    """Causal self-attention, grouped-query heads (Ainslie et al., 2023), optional QK-norm
    (Henry et al., 2020), and the placement's QKV-norm and head-wise scale (`SublayerNorms`)."""

    def __init__(self, config: GPTConfig, make_norm: NormFactory, extras: SublayerNorms) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads = config.n_heads, config.n_kv_heads
        self.head_dim = config.d_model // config.n_heads
        kv_dim = self.n_kv_heads * self.head_dim
        self.q_proj = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.k_proj = nn.Linear(config.d_model, kv_dim, bias=config.bias)
        self.v_proj = nn.Linear(config.d_model, kv_dim, bias=config.bias)
        self.o_proj = ResidualOut(config.d_model, config.d_model, bias=config.bias)
        qk_norm = config.qk_norm or extras.qkv_norm
        self.q_norm = make_norm(self.head_dim, "attn") if qk_norm else nn.Identity()
        self.k_norm = make_norm(self.head_dim, "attn") if qk_norm else nn.Identity()
        self.v_norm = make_norm(self.head_dim, "attn") if extras.qkv_norm else nn.Identity()
        self.head_scale = nn.Parameter(torch.ones(self.n_heads)) if extras.head_scale else None
        self.dropout = config.dropout
        self.resid_dropout = nn.Dropout(config.dropout)

    def heads(self, proj: nn.Linear, x: Tensor) -> Tensor:
        """(batch, T, d) -> (batch, heads, T, head_dim)."""
        return proj(x).unflatten(-1, (-1, self.head_dim)).transpose(1, 2)

    def forward(self, x: Tensor, rope: Rope | None = None, mask: Tensor | None = None) -> Tensor:
        q = self.q_norm(self.heads(self.q_proj, x))
        k = self.k_norm(self.heads(self.k_proj, x))
        v = self.v_norm(self.heads(self.v_proj, x))
        if rope is not None:
            q, k = apply_rope(q, rope), apply_rope(k, rope)
        y = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            is_causal=mask is None,
            dropout_p=self.dropout if self.training else 0.0,
            enable_gqa=self.n_kv_heads != self.n_heads,
        )
        if self.head_scale is not None:
            y = y * self.head_scale[:, None, None]
        return self.resid_dropout(self.o_proj(y.transpose(1, 2).flatten(2)))


class MLP(nn.Module):
    """Feed-forward sublayer: SwiGLU (Shazeer, 2020, "GLU Variants"), GELU or ReLU, and the
    placement's norm of the hidden activations (`SublayerNorms.ffn_norm`)."""

    def __init__(self, config: GPTConfig, make_norm: NormFactory, extras: SublayerNorms) -> None:
        super().__init__()
        gated = config.mlp == "swiglu"
        self.gate_proj = nn.Linear(config.d_model, config.d_ff, bias=config.bias) if gated else None
        self.up_proj = nn.Linear(config.d_model, config.d_ff, bias=config.bias)
        self.down_proj = ResidualOut(config.d_ff, config.d_model, bias=config.bias)
        self.act = ACTIVATIONS[config.mlp]
        self.hidden_norm = make_norm(config.d_ff, "mlp") if extras.ffn_norm else nn.Identity()
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        h = self.up_proj(x)
        h = self.act(self.gate_proj(x)) * h if self.gate_proj is not None else self.act(h)
        return self.dropout(self.down_proj(self.hidden_norm(h)))


class Block(nn.Module):
    """One layer: attention and MLP sublayers wired together by the norm placement."""

    def __init__(
        self, config: GPTConfig, layer_idx: int, make_norm: NormFactory, **placement_params: Any
    ) -> None:
        super().__init__()
        placement = NORM_PLACEMENTS.get(config.norm_placement)
        self.attn = Attention(config, make_norm, placement.sublayers)
        self.mlp = MLP(config, make_norm, placement.sublayers)
        self.placement = placement(
            layer_idx, config.n_layers, partial(make_norm, config.d_model), **placement_params
        )

    def forward(self, x: Tensor, rope: Rope | None = None, mask: Tensor | None = None) -> Tensor:
        return self.placement(x, partial(self.attn, rope=rope, mask=mask), self.mlp)


@dataclass
class GPTOutput:
    """What `GPT.forward` returns: the fields of transformers' `CausalLMOutputWithPast` it fills."""

    logits: Tensor
    loss: Tensor | None = None
    hidden_states: tuple[Tensor, ...] | None = None


class GPT(nn.Module):
    """Decoder-only transformer LM (Radford et al., 2019, GPT-2) with pluggable norms."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        norm_type = NORM_TYPES.entry(config.norm_type)
        width = {"model_width": config.d_model} if norm_type.model_width else {}
        make_norm = partial(norm_type.obj, eps=config.norm_eps, **config.norm_type_params, **width)
        self.residual_scaling = init_recipe(config.norm_placement, config.init).residual_scaling
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model)
        learned = config.pos == "learned"
        self.embed_positions = nn.Embedding(config.max_seq_len, config.d_model) if learned else None
        sqrt_d, scaled = math.sqrt(config.d_model), norm_type.scale_embeddings
        self.embed_scale = nn.Parameter(torch.full((1,), sqrt_d)) if scaled else None
        self.embed_norm = make_norm(config.d_model, "embed") if config.embed_norm else nn.Identity()
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(
            Block(config, i, make_norm, **config.placement_params) for i in range(config.n_layers)
        )
        self.final_norm = make_norm(config.d_model, "final") if config.final_norm else nn.Identity()
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.rope_cache: dict[tuple[int, torch.device], Rope] = {}
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """`_init_weights` on every module, children before parents (the order of transformers'
        `post_init`, so the same draws), then each placement's re-init of its sublayers, then
        the LM head tied to the token embeddings (`tie_embeddings`)."""
        self.apply(self._init_weights)
        for block in self.blocks:
            block.placement.init_sublayers(block.attn, block.mlp)
        if self.config.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def _init_weights(self, module: nn.Module) -> None:
        """normal(0, init_std) weights, zero biases; std / sqrt(2 n_layers) on residual outputs
        unless the init profile drops GPT-2's residual scaling (`model.init`)."""
        std = self.config.init_std
        if isinstance(module, ResidualOut) and self.residual_scaling:
            std /= math.sqrt(2 * self.config.n_layers)
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def get_input_embeddings(self) -> nn.Embedding:
        """The token embeddings (transformers' accessor, which methods use on any model)."""
        return self.embed_tokens

    def get_output_embeddings(self) -> nn.Linear:
        """The LM head (transformers' accessor)."""
        return self.lm_head

    def embed(self, input_ids: Tensor) -> Tensor:
        """Token (+ learned position) embeddings, times the norm type's scalar if it has one,
        normalized if the placement (or `norm.embed_norm`) says so (Peri-LN: y_0 = N(x_embed))."""
        seq_len = input_ids.shape[1]
        if seq_len > self.config.max_seq_len:
            raise ValueError(
                f"sequence length {seq_len} exceeds max_seq_len {self.config.max_seq_len}"
            )
        x = self.embed_tokens(input_ids)
        if self.embed_positions is not None:
            x = x + self.embed_positions(torch.arange(seq_len, device=input_ids.device))
        if self.embed_scale is not None:
            x = x * self.embed_scale
        return self.dropout(self.embed_norm(x))

    def rope(self, seq_len: int, device: torch.device) -> Rope:
        """The rotary tables of `seq_len` positions, computed once per length and device (the
        same call, so the same values as computing them in every forward); under
        `torch.compile` they are computed in the graph, as before, and not cached."""
        head_dim = self.config.d_model // self.config.n_heads
        if torch.compiler.is_compiling():
            return rope_tables(seq_len, head_dim, device)
        key = (seq_len, device)
        if key not in self.rope_cache:
            with torch.inference_mode(False), torch.no_grad():
                self.rope_cache[key] = rope_tables(seq_len, head_dim, device)
        return self.rope_cache[key]

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        labels: Tensor | None = None,
        output_hidden_states: bool | None = None,
        **unused: Any,
    ) -> GPTOutput:
        """Logits (and the loss against `labels`, the residual stream before each block and
        after the last); keyword arguments of transformers' models it has no use for, such as
        `use_cache`, are accepted and ignored."""
        config = self.config
        x = self.embed(input_ids)
        rope = self.rope(x.shape[1], x.device) if config.pos == "rope" else None
        padded = attention_mask is not None and not bool(attention_mask.all())
        mask = padding_mask(attention_mask) if padded else None
        hidden_states = [x]
        for block in self.blocks:
            x = block(x, rope, mask)
            hidden_states.append(x)
        logits = self.lm_head(self.final_norm(x))
        loss = None if labels is None else causal_lm_loss(logits, labels)
        keep_hidden = (
            config.output_hidden_states if output_hidden_states is None else output_hidden_states
        )
        return GPTOutput(logits, loss, tuple(hidden_states) if keep_hidden else None)


def causal_lm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy of each position's logits against the next label (-100 ignored)."""
    return F.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100
    )


def build_gpt(spec: GPTSpec, norm: ModelNorm, vocab_size: int) -> GPT:
    """The built-in decoder-only transformer (nanoGPT-style GPT-2 with configurable norms)."""
    return GPT(GPTConfig.of(spec, norm, vocab_size))
