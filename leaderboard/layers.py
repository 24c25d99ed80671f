"""Layer statistics as the Trial and Compare pages show them: profiles along depth."""

from __future__ import annotations

import numpy as np
import pandas as pd

PROFILES = (
    "hidden_rms",
    "max_abs_activation",
    "block_influence",
    "attention_sink",
    "effective_rank",
    "tokenwise_share",
    "layer_rotation",
)
"""The statistics a profile shows first, when a trial recorded them."""
PEAK = ("peak_activation", "peak_position", "peak_channel")
HEAD_PREFIX = "attention_sink/head_"
MOST_STEPS = 4
"""Profiles of a trained trial: at most this many of its evaluation steps, first to last."""


def profile_names(stats: pd.DataFrame) -> list[str]:
    """The statistics that have one value per layer (not the peak's, not one head's)."""
    names = stats["name"].unique()
    return sorted(n for n in names if n not in PEAK and not n.startswith(HEAD_PREFIX))


def default_profiles(names: list[str]) -> list[str]:
    return [name for name in PROFILES if name in names]


def shown_steps(stats: pd.DataFrame) -> list[int]:
    """Up to MOST_STEPS evaluation steps, evenly spread, always the first and the last."""
    steps = sorted(int(step) for step in stats["step"].unique())
    picks = np.linspace(0, len(steps) - 1, min(MOST_STEPS, len(steps))).round().astype(int)
    return [steps[i] for i in dict.fromkeys(picks)]


def by_step(stats: pd.DataFrame, name: str) -> pd.DataFrame:
    """One statistic's rows at the shown steps, a line per step."""
    rows = stats[stats["name"] == name]
    rows = rows[rows["step"].isin(shown_steps(rows))]
    return rows.assign(line=rows["step"].map(lambda step: f"step {step}"))


def heads(stats: pd.DataFrame) -> pd.DataFrame:
    """The per-head attention-sink rows of the last step: layer, head, value."""
    rows = stats[stats["name"].str.startswith(HEAD_PREFIX)]
    rows = rows[rows["step"] == rows["step"].max()]
    return rows.assign(head=rows["name"].str.removeprefix(HEAD_PREFIX).astype(int))


def peak(stats: pd.DataFrame) -> str | None:
    """The largest activation of the last step and where it is, in words."""
    rows = stats[stats["name"].isin(PEAK)]
    if rows.empty:
        return None
    last = rows[rows["step"] == rows["step"].max()].set_index("name")
    return (
        f"Peak activation {last.loc['peak_activation', 'value']:.4g} at layer "
        f"{int(last.loc['peak_activation', 'layer'])}, position "
        f"{int(last.loc['peak_position', 'value'])}, channel "
        f"{int(last.loc['peak_channel', 'value'])} (step {int(rows['step'].max())})."
    )


def final_profiles(stats: pd.DataFrame, name: str, line_of: dict[str, str]) -> pd.DataFrame:
    """One statistic at each trial's last step, a line per label of `line_of` (by key)."""
    rows = stats[stats["name"] == name]
    last = rows.groupby("key")["step"].transform("max")
    rows = rows[rows["step"] == last]
    return rows.assign(line=rows["key"].map(line_of))
