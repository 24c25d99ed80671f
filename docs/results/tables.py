"""Pivot tables of stored final metrics for the results write-ups (reads the database only).

    python docs/results/tables.py --db sqlite:///layerbench.db --suite compression \\
        --metric acc --by layers_removed --methods full bi-3 bi-6 bi-9 last-3 last-6 last-9

One row per method: the value of `--by` and `--metric` on each task, and the mean over the tasks.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from sqlalchemy import select
from sqlalchemy.orm import Session

from harness.store.db import make_engine
from harness.store.models import Result, Trial


def values(db: str, suite: str, names: set[str]) -> dict[tuple[str, str], dict[str, float]]:
    """(method, task) -> {metric: mean over the stored done trials}."""
    collected: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    query = (
        select(Trial.method, Trial.task, Result.name, Result.value)
        .join(Result, Result.trial_id == Trial.id)
        .where(Trial.suite == suite, Trial.status == "done", Result.name.in_(names))
    )
    with Session(make_engine(db, read_only=True)) as session:
        for method, task, name, value in session.execute(query):
            if value is not None:
                collected[(method, task)][name].append(value)
    return {
        key: {name: sum(v) / len(v) for name, v in metrics.items()}
        for key, metrics in collected.items()
    }


def table(db: str, suite: str, metric: str, by: str, methods: list[str]) -> str:
    stored = values(db, suite, {metric, by})
    tasks = sorted({task for (_, task), m in stored.items() if metric in m})
    lines = [
        f"| method | {by} | " + " | ".join(tasks) + f" | mean {metric} |",
        "| --- " * (len(tasks) + 3) + "|",
    ]
    for method in methods:
        cells = [stored.get((method, task), {}).get(metric) for task in tasks]
        found = [c for c in cells if c is not None]
        by_value = next((m[by] for (k, _), m in stored.items() if k == method and by in m), None)
        mean = f"{sum(found) / len(found):.4g}" if found else "n/a"
        shown = "n/a" if by_value is None else f"{by_value:g}"
        row = " | ".join("n/a" if c is None else f"{c:.4g}" for c in cells)
        lines.append(f"| {method} | {shown} | {row} | {mean} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--suite", required=True)
    parser.add_argument("--metric", required=True)
    parser.add_argument("--by", required=True)
    parser.add_argument("--methods", nargs="+", required=True)
    args = parser.parse_args()
    print(table(args.db, args.suite, args.metric, args.by, args.methods))


if __name__ == "__main__":
    main()
