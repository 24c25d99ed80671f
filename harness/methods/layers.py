"""The decoder blocks of a causal LM: find them, observe their residual streams, remove them.

Two layouts are known: the built-in `gpt` (`model.blocks`, sublayers `attn` and `mlp`) and the
transformers Llama family (`model.model.layers`, sublayers `self_attn` and `mlp`: Llama, Mistral,
Qwen2/3, SmolLM and others built the same way). Removing layers keeps the model runnable: the
config's layer count (`num_hidden_layers`, which is `n_layers` for `gpt`) and `layer_types`
follow, and the attention modules' `layer_idx` (their slot in the KV cache) are renumbered.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import torch
from torch import Tensor, nn

from harness.registry import PruneTarget

Observer = Callable[[int, Tensor, Tensor], None]
T = TypeVar("T")
BRANCHES = ("attention", "mlp")


@dataclass(frozen=True)
class Layout:
    """Where a model family keeps its decoder blocks and their two sublayers."""

    blocks: str
    attention: str
    mlp: str
    attention_returns_weights: bool


LAYOUTS = (
    Layout("blocks", "attn", "mlp", attention_returns_weights=False),
    Layout("model.layers", "self_attn", "mlp", attention_returns_weights=True),
)


def layout(model: nn.Module) -> Layout:
    """The layout of `model`; TypeError for a model of another family."""
    for candidate in LAYOUTS:
        found = _resolve(model, candidate.blocks)
        if isinstance(found, nn.ModuleList) and all(
            hasattr(block, name) for block in found for name in (candidate.attention, candidate.mlp)
        ):
            return candidate
    raise TypeError(f"{type(model).__name__} is neither LayerBench's gpt nor a Llama-family model")


def _resolve(model: nn.Module, path: str) -> Any:
    obj: Any = model
    for name in path.split("."):
        obj = getattr(obj, name, None)
    return obj


def blocks(model: nn.Module) -> nn.ModuleList:
    """The decoder blocks of `model`, in order."""
    return _resolve(model, layout(model).blocks)


def sublayer(model: nn.Module, index: int, target: Literal["attention", "mlp"]) -> nn.Module:
    """The attention or MLP sublayer of block `index`."""
    found = layout(model)
    return getattr(blocks(model)[index], found.attention if target == "attention" else found.mlp)


def linears(module: nn.Module) -> list[nn.Linear]:
    """Every nn.Linear inside `module`."""
    return [child for child in module.modules() if isinstance(child, nn.Linear)]


class ZeroBranch(nn.Module):
    """A removed sublayer: its residual branch adds zero (and, as attention, no weights)."""

    def __init__(self, returns_weights: bool) -> None:
        super().__init__()
        self.returns_weights = returns_weights

    def forward(
        self, hidden_states: Tensor, *args: Any, **kwargs: Any
    ) -> Tensor | tuple[Tensor, None]:
        zeros = torch.zeros_like(hidden_states)
        return (zeros, None) if self.returns_weights else zeros


def remove_layers(
    model: nn.Module, indices: Collection[int], target: PruneTarget
) -> Callable[[], None]:
    """Remove blocks `indices` (or only their attention / MLP sublayer) in place; return an undo."""
    found = layout(model)
    owner_path, _, name = found.blocks.rpartition(".")
    owner = _resolve(model, owner_path) if owner_path else model
    original: nn.ModuleList = getattr(owner, name)
    config = model.config
    n_layers, layer_types = config.num_hidden_layers, getattr(config, "layer_types", None)
    slots = {attention: attention.layer_idx for attention in _cache_users(original, found)}
    replaced: list[tuple[nn.Module, str, nn.Module]] = []
    if target == "block":
        setattr(owner, name, nn.ModuleList(_kept(original, indices)))
        config.num_hidden_layers = n_layers - len(indices)
        if layer_types is not None:
            config.layer_types = _kept(layer_types, indices)
    else:
        _check_uniform_cache(layer_types, target)
        replaced = _zero_sublayers(original, indices, target, found)
    _renumber_cache_slots(getattr(owner, name), found)

    def undo() -> None:
        setattr(owner, name, original)
        config.num_hidden_layers = n_layers
        if layer_types is not None:
            config.layer_types = layer_types
        for block, attribute, module in replaced:
            setattr(block, attribute, module)
        for attention, slot in slots.items():
            attention.layer_idx = slot

    return undo


def _kept(items: Sequence[T], indices: Collection[int]) -> list[T]:
    return [item for i, item in enumerate(items) if i not in indices]


def _zero_sublayers(
    blocks_: nn.ModuleList, indices: Collection[int], target: PruneTarget, found: Layout
) -> list[tuple[nn.Module, str, nn.Module]]:
    """Replace the target sublayer of blocks `indices` by a ZeroBranch; return what was there."""
    attribute = found.attention if target == "attention" else found.mlp
    returns_weights = target == "attention" and found.attention_returns_weights
    replaced = []
    for i in indices:
        replaced.append((blocks_[i], attribute, getattr(blocks_[i], attribute)))
        setattr(blocks_[i], attribute, ZeroBranch(returns_weights))
    return replaced


@contextmanager
def layers_removed(
    model: nn.Module, indices: Collection[int], target: PruneTarget
) -> Iterator[nn.Module]:
    """`model` without blocks (or sublayers) `indices` for the duration of the block."""
    undo = remove_layers(model, indices, target)
    try:
        yield model
    finally:
        undo()


def _cache_users(blocks_: Sequence[nn.Module], found: Layout) -> list[nn.Module]:
    """The attention sublayers that hold a KV-cache slot (`layer_idx`), in block order."""
    attentions = (getattr(block, found.attention) for block in blocks_)
    return [attention for attention in attentions if hasattr(attention, "layer_idx")]


def _renumber_cache_slots(blocks_: Sequence[nn.Module], found: Layout) -> None:
    for slot, attention in enumerate(_cache_users(blocks_, found)):
        attention.layer_idx = slot


def _check_uniform_cache(layer_types: list[str] | None, target: PruneTarget) -> None:
    """Removed attention frees a KV-cache slot; the slots shift, which needs one layer type."""
    if target == "attention" and layer_types is not None and len(set(layer_types)) > 1:
        raise NotImplementedError(
            "removing attention sublayers from a model with mixed layer_types "
            f"{sorted(set(layer_types))}"
        )


def observe_streams(
    model: nn.Module, batches: Sequence[Tensor], target: PruneTarget, observe: Observer
) -> None:
    """Run `batches`; call `observe(i, x_in, x_out)` with the residual stream around unit `i`.

    A unit is a block, or its attention or MLP sublayer; streams are (tokens, d_model) in float32.
    A sublayer's streams are x and x + f(x) of a pre-norm residual block, x_out = x_in + attn + mlp;
    a block of another form (post-norm) raises ValueError.
    """
    found = layout(model)
    branches: dict[tuple[int, str], Tensor] = {}
    handles = []
    for i, block in enumerate(blocks(model)):
        handles.append(
            block.register_forward_hook(_block_hook(i, target, branches, observe), with_kwargs=True)
        )
        if target != "block":
            for kind, name in zip(BRANCHES, (found.attention, found.mlp), strict=True):
                handles.append(
                    getattr(block, name).register_forward_hook(_branch_hook(i, kind, branches))
                )
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in batches:
                model(input_ids=batch, use_cache=False)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()


def _first(value: Any) -> Tensor:
    return value[0] if isinstance(value, tuple) else value


def _branch_hook(
    index: int, kind: str, branches: dict[tuple[int, str], Tensor]
) -> Callable[..., None]:
    def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        branches[index, kind] = _first(output)

    return hook


def _block_hook(
    index: int, target: PruneTarget, branches: dict[tuple[int, str], Tensor], observe: Observer
) -> Callable[..., None]:
    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        x_in = (args[0] if args else kwargs["hidden_states"]).flatten(0, -2).float()
        x_out = _first(output).flatten(0, -2).float()
        if target != "block":
            attn, mlp = (branches.pop((index, kind)).flatten(0, -2).float() for kind in BRANCHES)
            x_in, x_out = _sublayer_streams(index, target, x_in, x_out, attn, mlp)
        observe(index, x_in, x_out)

    return hook


def _sublayer_streams(
    index: int, target: PruneTarget, x_in: Tensor, x_out: Tensor, attn: Tensor, mlp: Tensor
) -> tuple[Tensor, Tensor]:
    """The stream before and after the target sublayer of a block x_out = x_in + attn + mlp."""
    scale = float(x_out.abs().max())
    if not torch.allclose(x_in + attn + mlp, x_out, rtol=1e-2, atol=1e-2 * scale):
        raise ValueError(
            "sublayer streams need pre-norm residual blocks (x + attn + mlp); "
            f"block {index} of this model is not one"
        )
    return (x_in, x_in + attn) if target == "attention" else (x_out - mlp, x_out)
