"""How important each decoder block is, for LayerwiseQuant's bits per block (registered in
LAYER_IMPORTANCE; higher is more important; see `harness.methods.quantization.block_bits`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from harness.methods.layers import blocks, linears
from harness.methods.pruning import mean_cosines


def cosine_importance(model: nn.Module, calibration: list[Tensor]) -> list[float]:
    """LIM (Dumitru et al., 2024, LayerwiseQuant): -E_tokens[cos(x_in, x_out)] of each block.

    A block that changes its input more is more important; the cosine is averaged over tokens.
    """
    if not calibration:
        raise ValueError("layerwise importance 'cosine' needs calibration batches")
    return [-cosine for cosine in mean_cosines(model, calibration, "block")]


def z_outlier_fraction(block: nn.Module) -> float:
    """The fraction of a block's Linear weights more than one std above their mean (z > 1)."""
    weights = torch.cat([linear.weight.detach().float().flatten() for linear in linears(block)])
    z = (weights - weights.mean()) / weights.std()
    return float((z > 1).double().mean())


def outlier_importance(model: nn.Module, calibration: list[Tensor]) -> list[float]:
    """ZD (Dumitru et al., 2024, LayerwiseQuant): -(fraction of weights with z-score > 1).

    The paper counts a layer's weights "much larger than average (smaller is better)": the
    fewer such outliers, the more important the block. Mean and std are over all its Linear weights.
    """
    return [-z_outlier_fraction(block) for block in blocks(model)]


def position_importance(model: nn.Module, calibration: list[Tensor]) -> list[float]:
    """Baseline: earlier blocks are more important (importance -index)."""
    return [-float(i) for i in range(len(blocks(model)))]


def random_importance(model: nn.Module, calibration: list[Tensor]) -> list[float]:
    """Baseline: a U(0, 1) importance per block from torch's global generator (seeded per trial)."""
    return torch.rand(len(blocks(model))).tolist()
