"""The trainable parameters of a model by role: its blocks, and the always-on parts around them.

Layerwise methods act on "layers": the decoder blocks (`harness.methods.layers.blocks`: `blocks`
of the built-in gpt, `model.layers` of a Llama-family model). Everything outside the blocks is
always on: the input embeddings, the output head (a head tied to the token embedding counts as
head) and the rest (the final norm).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from harness.methods.layers import blocks


@dataclass(frozen=True)
class Layers:
    """The trainable parameters of a model by role; every parameter appears exactly once."""

    blocks: list[list[nn.Parameter]]
    """The parameters of each block, in depth order."""
    embeddings: list[nn.Parameter]
    """Input embeddings (token and position tables) not shared with the head."""
    head: list[nn.Parameter]
    """The output head (a tied token embedding included)."""
    rest: list[nn.Parameter]
    """Everything else outside the blocks (the final norm)."""

    @property
    def hidden_matrices(self) -> list[nn.Parameter]:
        """The 2D weights inside the blocks."""
        return [p for block in self.blocks for p in block if p.ndim == 2]


def output_head(model: nn.Module) -> nn.Module | None:
    """The output projection: transformers' `get_output_embeddings()`, else `lm_head`."""
    get_output = getattr(model, "get_output_embeddings", None)
    head = get_output() if callable(get_output) else None
    return head if isinstance(head, nn.Module) else getattr(model, "lm_head", None)


def trainable(module: nn.Module) -> list[nn.Parameter]:
    return [p for p in module.parameters() if p.requires_grad]


def model_layers(model: nn.Module) -> Layers:
    """The model's trainable parameters split into blocks, embeddings, head and the rest."""
    per_block = [trainable(block) for block in blocks(model)]
    seen = {id(p) for block in per_block for p in block}
    head_module = output_head(model)
    head = [p for p in trainable(head_module) if id(p) not in seen] if head_module else []
    seen |= {id(p) for p in head}
    tables = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    unique = {id(p): p for table in tables for p in trainable(table) if id(p) not in seen}
    embeddings = list(unique.values())
    seen |= set(unique)
    rest = [p for p in trainable(model) if id(p) not in seen]
    return Layers(per_block, embeddings, head, rest)
