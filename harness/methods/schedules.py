"""Learning-rate schedules (SPEC 5.3), each registered by name: (step, total steps, warmup
steps, min ratio) -> the learning-rate multiplier.
"""

from __future__ import annotations

import math


def warmup(step: int, warmup_steps: int) -> float:
    """Linear warmup from 1/warmup_steps to 1."""
    return min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0


def decay_progress(step: int, total: int, start: int) -> float:
    """Fraction of the steps from `start` to `total` done, in [0, 1]."""
    return min(1.0, max(0.0, (step - start) / max(1, total - start)))


def constant(step: int, total: int, warmup_steps: int, min_ratio: float) -> float:
    """Constant learning rate after linear warmup."""
    return warmup(step, warmup_steps)


def cosine(step: int, total: int, warmup_steps: int, min_ratio: float) -> float:
    """Linear warmup, then cosine decay to min_ratio (Loshchilov & Hutter, 2017, SGDR)."""
    if step < warmup_steps:
        return warmup(step, warmup_steps)
    progress = decay_progress(step, total, warmup_steps)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def linear(step: int, total: int, warmup_steps: int, min_ratio: float) -> float:
    """Linear warmup, then linear decay to min_ratio."""
    if step < warmup_steps:
        return warmup(step, warmup_steps)
    return 1 - (1 - min_ratio) * decay_progress(step, total, warmup_steps)


WSD_COOLDOWN_FRACTION = 0.2


def wsd(step: int, total: int, warmup_steps: int, min_ratio: float) -> float:
    """Warmup-stable-decay: a linear cooldown over the last 20% of steps (Hägele et al., 2024).

    Linear warmup, a constant rate, then linear decay to min_ratio.
    """
    if step < warmup_steps:
        return warmup(step, warmup_steps)
    cooldown_start = max(warmup_steps, total - round(WSD_COOLDOWN_FRACTION * total))
    return 1 - (1 - min_ratio) * decay_progress(step, total, cooldown_start)
