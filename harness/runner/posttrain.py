"""Post-training steps of a trial: prune, then quantize, a trained or pretrained model.

Both methods may read calibration batches; greedy pruning also scores candidate models by a
validation loss. Reported: layers removed, effective bits per weight and model bytes, and per
layer (as layer statistics at the trial's last step): `removed` (1 for each removed block, in the
original numbering) and `bits` (each block's weight bits after quantization).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from harness.records import LayerStat
from harness.spec.recipe import TrialRecipe
from harness.tasks.base import Task

Loss = Callable[[nn.Module], float]


def parameter_bytes(model: nn.Module) -> int:
    """Bytes of the model's parameters and buffers at their stored dtypes (shared counted once)."""
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    return sum(t.numel() * t.element_size() for t in tensors.values())


@torch.no_grad()
def calibration_loss(calibration: list[Tensor]) -> Loss:
    """Mean next-token loss of a model on the calibration batches (for greedy pruning)."""

    def loss(model: nn.Module) -> float:
        device = next(model.parameters()).device
        total, count = 0.0, 0
        for batch in calibration:
            ids = batch.to(device)
            logits = model(input_ids=ids[:, :-1]).logits.float()
            total += torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), ids[:, 1:].flatten(), reduction="sum"
            ).item()
            count += ids[:, 1:].numel()
        return total / count

    return loss


def draws(recipe: TrialRecipe) -> int:
    """How many random draws of the trained model the recipe's compression averages over."""
    layerwise = recipe.quantize.layerwise if recipe.quantize else None
    return max(recipe.prune.draws if recipe.prune else 1, layerwise.draws if layerwise else 1)


def draw_seed(seed: int, draw: int) -> int:
    """The seed of draw `draw` of a trial of seed `seed` (draw 0: the seed itself)."""
    return seed if draw == 0 else seed * 1_000_003 + draw


def averaged_draws(
    model: nn.Module,
    recipe: TrialRecipe,
    calibration: list[Tensor],
    step: int,
    validation: Loss,
    final: Callable[[nn.Module], dict[str, float]],
) -> tuple[dict[str, float], list[LayerStat]]:
    """Compress a copy of the trained `model` once per draw (`draws`; draw d >= 1 reseeds the
    random criterion and torch's global generator from `draw_seed`, so draw 0 is exactly the
    single draw) and return the mean over the draws of its final metrics (`final`) and of what
    compression reports, with `draws`; the layer statistics are draw 0's."""
    import copy

    found: list[dict[str, float]] = []
    layers: list[LayerStat] = []
    for draw in range(draws(recipe)):
        if draw:
            torch.manual_seed(draw_seed(recipe.seed, draw))
        drawn = copy.deepcopy(model)
        drawn, metrics, stats = compress(
            drawn, recipe, calibration, step, validation, draw_seed(recipe.seed, draw)
        )
        found.append({**final(drawn), **metrics})
        layers = layers or stats
    shared = set.intersection(*(set(f) for f in found))
    mean = {name: sum(f[name] for f in found) / len(found) for name in sorted(shared)}
    return mean | {"draws": float(len(found))}, layers


def compress(
    model: nn.Module,
    recipe: TrialRecipe,
    calibration: list[Tensor],
    step: int,
    validation: Loss | None = None,
    seed: int | None = None,
) -> tuple[nn.Module, dict[str, float], list[LayerStat]]:
    """Apply the recipe's `prune` then `quantize` (pruning draws from `seed`, default the
    recipe's); returns the model, what they report, and which layers they removed or quantized
    to how many bits (as layer statistics at `step`)."""
    model, metrics, layers = prune(model, recipe, calibration, step, validation, seed)
    model, quantized, bits = quantize(model, recipe, calibration, step)
    return model, metrics | quantized, layers + bits


def prune(
    model: nn.Module,
    recipe: TrialRecipe,
    calibration: list[Tensor],
    step: int,
    validation: Loss | None = None,
    seed: int | None = None,
) -> tuple[nn.Module, dict[str, float], list[LayerStat]]:
    """The recipe's `prune` (nothing without one; drawing from `seed`, default the recipe's):
    the model, layers removed and left, and a `removed` statistic (1) for each removed block, in
    the original numbering, at `step`."""
    from harness.methods.pruning import PruneContext, prune_model

    if recipe.prune is None:
        return model, {}, []
    context = PruneContext(
        calibration,
        validation or calibration_loss(calibration),
        recipe.seed if seed is None else seed,
    )
    model, pruned = prune_model(model, recipe.prune, context)
    metrics = {"layers_removed": float(len(pruned.removed)), "layers": float(pruned.layers_after)}
    return model, metrics, [LayerStat(step, layer, "removed", 1.0) for layer in pruned.removed]


def quantize(
    model: nn.Module, recipe: TrialRecipe, calibration: list[Tensor], step: int
) -> tuple[nn.Module, dict[str, float], list[LayerStat]]:
    """The recipe's `quantize`: the model, its effective bits and bytes (as stored, without
    one), and each block's `bits` at `step`."""
    from harness.methods.quantization import quantize_model

    if recipe.quantize is None:
        return (
            model,
            {"effective_bits": stored_bits(model), "model_bytes": float(parameter_bytes(model))},
            [],
        )
    model, quantized = quantize_model(model, recipe.quantize, calibration)
    metrics = {
        "effective_bits": quantized.effective_bits,
        "model_bytes": float(quantized.model_bytes),
    }
    bits = quantized.bits_per_layer.items()
    return model, metrics, [LayerStat(step, layer, "bits", float(b)) for layer, b in bits]


def task_calibration(task: Task, recipe: TrialRecipe, device: torch.device) -> list[Tensor]:
    """Calibration batches for pruning and quantization: training windows of a fixed stream."""
    samples = recipe.prune.calibration_samples if recipe.prune else 32
    batch_size = recipe.train.batch_size
    batches = task.train_batches(batch_size, torch.Generator().manual_seed(0))
    return [next(batches)[0].to(device) for _ in range(math.ceil(samples / batch_size))]


def task_validation(task: Task, recipe: TrialRecipe) -> Loss:
    """The task's validation loss of a candidate model (greedy pruning's objective)."""
    train = recipe.train

    def loss(model: nn.Module) -> float:
        return task.evaluate(model, train.batch_size, train.eval_batches, False)["val_loss"]

    return loss


def stored_bits(model: nn.Module) -> float:
    """Bits per weight of the block linears as stored (their dtype), for an unquantized model."""
    from harness.methods.layers import blocks, linears

    weights = [linear.weight for block in blocks(model) for linear in linears(block)]
    return sum(8.0 * w.element_size() * w.numel() for w in weights) / sum(
        w.numel() for w in weights
    )
