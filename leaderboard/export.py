"""Raw export of the leaderboard's selection: one row per trial with its identity, status, config
flattened (`config.optimizer.lr`) and final metrics (`metric.val_loss`), as CSV or Parquet."""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
from sqlalchemy import Engine

from harness.utils import flatten
from leaderboard import data

IDENTITY = ["key", "method", "model", "task", "seed", "status"]


def raw_frame(
    trials: pd.DataFrame,
    configs: Mapping[str, Mapping[str, Any]],
    finals: pd.DataFrame,
) -> pd.DataFrame:
    """`trials` (data.trials' columns) joined with each trial's flattened config and its final
    metrics (data.final_values' key, name, value rows); a metric a trial lacks is empty."""
    frame = trials[IDENTITY].reset_index(drop=True)
    flat = pd.DataFrame.from_records(
        [
            {f"config.{k}": v for k, v in flatten(configs.get(key, {})).items()}
            for key in frame["key"]
        ]
    )
    metrics = (
        finals.pivot_table(index="key", columns="name", values="value", aggfunc="first")
        .add_prefix("metric.")
        .reindex(frame["key"])
        .reset_index(drop=True)
        if not finals.empty
        else pd.DataFrame(index=frame.index)
    )
    return pd.concat([frame, flat, metrics], axis=1)


def selection_frame(engine: Engine, trials: pd.DataFrame, metrics: Iterable[str]) -> pd.DataFrame:
    """The raw export of the stored `trials` (rows of `data.trials`)."""
    keys = list(trials["key"])
    return raw_frame(
        trials, data.trial_configs(engine, keys), data.final_values(engine, keys, metrics)
    )


def csv_bytes(frame: pd.DataFrame) -> bytes:
    return frame.to_csv(index=False).encode()


def parquet_bytes(frame: pd.DataFrame) -> bytes:
    """Parquet (pyarrow); empty values stay nulls."""
    out = io.BytesIO()
    frame.to_parquet(out, index=False, engine="pyarrow")
    return out.getvalue()
