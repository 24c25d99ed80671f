"""Read-side queries shared by the CLI and the leaderboard."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from harness.store.models import Result, Trial

CHUNK = 500


def trial_statuses(engine: Engine, keys: Iterable[str]) -> dict[str, str]:
    """Stored status by trial key (keys never stored are absent)."""
    keys = list(keys)
    found: dict[str, str] = {}
    with Session(engine) as session:
        for start in range(0, len(keys), CHUNK):
            rows = session.execute(
                select(Trial.key, Trial.status).where(Trial.key.in_(keys[start : start + CHUNK]))
            )
            found.update({row.key: row.status for row in rows})
    return found


def unlogged_count(engine: Engine, suite: str) -> int:
    """Finished trials of a suite not yet logged to MLflow."""
    with Session(engine) as session:
        return session.scalar(
            select(func.count()).where(
                Trial.suite == suite,
                Trial.mlflow_run_id.is_(None),
                Trial.status.in_(["done", "diverged", "failed", "timeout"]),
            )
        )


def stored_outcomes(engine: Engine, keys: Iterable[str]) -> list[dict[str, Any]]:
    """Finished trials with their final metrics, as plain records for ranking."""
    keys = list(keys)
    records = []
    with Session(engine) as session:
        for start in range(0, len(keys), CHUNK):
            trials = session.scalars(
                select(Trial).where(
                    Trial.key.in_(keys[start : start + CHUNK]),
                    Trial.status.in_(["done", "diverged", "failed", "timeout"]),
                )
            ).all()
            metrics: dict[int, dict[str, float]] = defaultdict(dict)
            ids = [trial.id for trial in trials]
            for result in session.scalars(select(Result).where(Result.trial_id.in_(ids))):
                if result.value is not None:
                    metrics[result.trial_id][result.name] = result.value
            records += [
                {
                    "method": trial.method,
                    "model": trial.model,
                    "task": trial.task,
                    "seed": trial.seed,
                    "status": trial.status,
                    "metrics": metrics[trial.id],
                    "sweep": trial.sweep,
                    "key": trial.key,
                }
                for trial in trials
            ]
    return records
