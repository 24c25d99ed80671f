"""What trials cost (`harness.runner.cost`), as the Trial page and the Compare view show it:
the device, tokens/s, MFU, peak memory and model FLOPs per token."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from harness.ranking.table import EMPTY
from harness.trial_metrics import COST_METRICS

LABELS = {
    "device_name": "device",
    "devices": "devices",
    "tokens_per_s": "tokens/s",
    "mfu": "MFU",
    "peak_memory_bytes": "peak memory",
    "flops_per_token": "FLOPs/token",
}
"""Each cost figure's column, in the order shown."""
MIB = 2**20


def shown(name: str, value: Any) -> str:
    """A cost figure as the pages print it (an en dash where none is stored)."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return EMPTY
    if name == "mfu":
        return f"{100 * value:.2f}%"
    if name == "peak_memory_bytes":
        return f"{value / MIB:,.0f} MiB"
    if name in ("tokens_per_s", "flops_per_token"):
        return f"{value:,.4g}" if value < 1e4 else f"{value:,.0f}"
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def trial_cost(results: Mapping[str, float], environment: Mapping[str, Any] | None) -> pd.DataFrame:
    """One trial's cost: a row per figure (what, value)."""
    found = {**results, "device_name": (environment or {}).get("device_name")}
    rows = [(label, shown(name, found.get(name))) for name, label in LABELS.items()]
    return pd.DataFrame(rows, columns=["cost", "value"])


def method_costs(
    finals: pd.DataFrame, devices: Mapping[str, str | None], method_of: Mapping[str, str]
) -> pd.DataFrame:
    """Each method's cost over its trials: the mean of each cost metric (`finals`: key, name,
    value) and the devices they ran on (`devices`: name by key)."""
    finals = finals[finals["name"].isin(COST_METRICS)].assign(
        method=lambda f: f["key"].map(method_of)
    )
    means = finals.groupby(["method", "name"])["value"].mean().unstack()
    rows = []
    for method in dict.fromkeys(method_of.values()):
        names = sorted({str(devices.get(k)) for k, m in method_of.items() if m == method})
        row = {"method": method, "device": ", ".join(names)}
        for name, label in LABELS.items():
            if name != "device_name":
                known = method in means.index and name in means
                row[label] = shown(name, means.at[method, name] if known else None)
        rows.append(row)
    return pd.DataFrame(rows, columns=["method", *LABELS.values()])
