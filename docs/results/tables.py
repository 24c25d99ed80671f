"""Pivot tables of stored final metrics for the results write-ups (reads the database only).

    python docs/results/tables.py --db sqlite:///layerbench.db --suite compression \\
        --metric acc --by layers_removed --methods full bi-3 bi-6 bi-9 last-3 last-6 last-9

One row per method: the value of `--by` and `--metric` on each task, and the mean over the tasks.
With `--sweep FIELD` instead of `--by`, one row per (method, task): the mean of `--metric` at each
swept value of FIELD (e.g. optimizer.lr), the best in bold, seeds that did not finish counted.
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


def sweep_table(db: str, suite: str, metric: str, field: str) -> str:
    """Mean `metric` per (method, task) at each swept value of `field`, best in bold."""
    finals: dict[tuple[str, str], dict[float, list[float | None]]] = defaultdict(
        lambda: defaultdict(list)
    )
    query = (
        select(Trial.method, Trial.task, Trial.sweep, Result.value)
        .outerjoin(Result, (Result.trial_id == Trial.id) & (Result.name == metric))
        .where(Trial.suite == suite)
    )
    with Session(make_engine(db, read_only=True)) as session:
        for method, task, sweep, value in session.execute(query):
            if field in sweep:
                finals[(method, task)][sweep[field]].append(value)
    lines = [f"| method | task | {metric} at each {field} |", "| --- | --- | --- |"]
    for (method, task), points in sorted(finals.items()):
        means = {
            point: sum(done) / len(done) if (done := [v for v in found if v is not None]) else None
            for point, found in sorted(points.items())
        }
        best = min((m for m in means.values() if m is not None), default=None)
        cells = []
        for point, mean in means.items():
            shown = "no finished seed" if mean is None else f"{mean:.4g}"
            missing = sum(v is None for v in points[point])
            shown += f" ({missing} not finished)" if missing and mean is not None else ""
            cells.append(f"{point:g}: " + (f"**{shown}**" if mean == best else shown))
        lines.append(f"| {method} | {task} | " + " · ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--suite", required=True)
    parser.add_argument("--metric", required=True)
    parser.add_argument("--by")
    parser.add_argument("--methods", nargs="+")
    parser.add_argument("--sweep", metavar="FIELD")
    args = parser.parse_args()
    if args.sweep:
        print(sweep_table(args.db, args.suite, args.metric, args.sweep))
    elif args.by and args.methods:
        print(table(args.db, args.suite, args.metric, args.by, args.methods))
    else:
        parser.error("give --sweep FIELD, or --by and --methods")


if __name__ == "__main__":
    main()
