"""Pivot tables of stored final metrics for the results write-ups (reads the database only).

    python docs/results/tables.py --db sqlite:///layerbench.db --suite compression \\
        --metric acc --by layers_removed --methods full bi-3 bi-6 bi-9 last-3 last-6 last-9

One row per method: the value of `--by` and `--metric` on each task, and the mean over the tasks.
With `--sweep FIELD` instead of `--by`, one row per (method, task): the mean of `--metric` at each
swept value of FIELD (e.g. optimizer.lr), the best in bold (best by the metric's direction in
`harness.registry.METRICS`), seeds that did not finish counted.

With `--layers STAT --task T --model M`, one row per method: STAT (a layer statistic such as
grad_norm or hidden_rms) of each block at each trial's last recorded step, mean over the done
seeds.

All are `harness.ranking.Table`s rendered by `harness.ranking.render.table_md`, the renderer
of `layerbench rank --format md`.

    python docs/results/tables.py --findings-verdicts

prints the verdict of every claim x recipe of suites/findings/ under the current rule, ranked
from the committed databases in docs/results/data/ (docs/results/findings.md, "Verdicts under
the current rule"), with the decisions against an arm that does not train counted apart.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from harness.ranking import Cell, Section, Table
from harness.ranking.render import table_md
from harness.ranking.table import EMPTY, number, plain_columns
from harness.registry import METRICS
from harness.store.db import make_engine
from harness.store.models import LayerStatistic, Result, Trial


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


def table(db: str, suite: str, metric: str, by: str, methods: list[str]) -> Table:
    stored = values(db, suite, {metric, by})
    tasks = sorted({task for (_, task), m in stored.items() if metric in m})
    rows = []
    for method in methods:
        cells = [stored.get((method, task), {}).get(metric) for task in tasks]
        found = [c for c in cells if c is not None]
        by_value = next((m[by] for (k, _), m in stored.items() if k == method and by in m), None)
        mean = sum(found) / len(found) if found else None
        rows.append(
            [Cell(method, method), number(by_value, "g"), *map(number, cells), number(mean)]
        )
    header = ["method", by, *tasks, f"mean {metric}"]
    return Table(f"{metric} by {by}", plain_columns(header), [Section("", rows)])


def sweep_table(db: str, suite: str, metric: str, field: str) -> Table:
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
    pick = min if METRICS.get(metric).direction == "min" else max
    rows = []
    for (method, task), points in sorted(finals.items()):
        means = {
            point: sum(done) / len(done) if (done := [v for v in found if v is not None]) else None
            for point, found in sorted(points.items())
        }
        best = pick((m for m in means.values() if m is not None), default=None)
        shown = [_point(point, mean, points[point], mean == best) for point, mean in means.items()]
        rows.append([Cell(method, method), Cell(task, task), Cell(means, " · ".join(shown))])
    header = ["method", "task", f"{metric} at each {field}"]
    return Table(f"{metric} at each {field}", plain_columns(header), [Section("", rows)])


def layer_table(db: str, suite: str, stat: str, task: str, model: str, methods: list[str]) -> Table:
    """`stat` of each block at each done trial's last recorded step, mean over seeds."""
    last = (
        select(LayerStatistic.trial_id, func.max(LayerStatistic.step).label("step"))
        .where(LayerStatistic.name == stat)
        .group_by(LayerStatistic.trial_id)
        .subquery()
    )
    query = (
        select(Trial.method, LayerStatistic.layer, LayerStatistic.value)
        .join(LayerStatistic, LayerStatistic.trial_id == Trial.id)
        .join(last, (last.c.trial_id == Trial.id) & (last.c.step == LayerStatistic.step))
        .where(Trial.suite == suite, Trial.task == task, Trial.model == model)
        .where(Trial.status == "done", LayerStatistic.name == stat)
    )
    found: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    with Session(make_engine(db, read_only=True)) as session:
        for method, layer, value in session.execute(query):
            if value is not None:
                found[method][layer].append(value)
    blocks = sorted({layer for by_layer in found.values() for layer in by_layer})
    rows = [
        [Cell(method, method)]
        + [number(_mean(found[method].get(layer, [])), ".3g") for layer in blocks]
        for method in methods
        if method in found
    ]
    header = ["method", *(f"block {layer}" for layer in blocks)]
    return Table(
        f"{stat} by block, last step ({task} / {model})", plain_columns(header), [Section("", rows)]
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _point(point: float, mean: float | None, found: list[float | None], best: bool) -> str:
    shown = "no finished seed" if mean is None else f"{mean:.4g}"
    missing = sum(v is None for v in found)
    shown += f" ({missing} not finished)" if missing and mean is not None else ""
    return f"{point:g}: " + (f"**{shown}**" if best else shown)


def findings_verdicts() -> str:
    """The markdown table of every findings claim x recipe (module doc), with its survival of
    one Holm family over the whole page (`harness.claims.page`) and the counts by kind."""
    import json

    from benchmarks.rank_snapshot import outputs
    from harness.claims.page import page_holm, survives

    rows: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    for label, text in sorted(outputs().items()):
        if label.startswith("findings-") and label.endswith(".json"):
            suite = label.removeprefix("findings-").removesuffix(".json")
            for finding in json.loads(text.split("\n", 1)[1])["findings"]:
                rows += [(suite, finding, check) for check in finding["checks"]]
    raw = [_raw_p(finding, check) for _, finding, check in rows]
    adjusted = page_holm(raw)
    lines = [
        "| suite | claim | recipe | seeds | signs (+/-) | interval of the mean | seeds state "
        "| verdict | page Holm |",
        "|---|---|---|---:|---|---|---|---|---|",
    ]
    counts: dict[str, int] = defaultdict(int)
    apart: dict[str, int] = defaultdict(int)
    for (suite, finding, check), page in zip(rows, adjusted, strict=True):
        record = check.get("sequential") or {}
        low, high = check["ci_low"], check["ci_high"]
        shown = EMPTY if low is None or high is None else f"[{low:+.3g}, {high:+.3g}]"
        kept = survives(check["verdict"], page, 0.05) or EMPTY
        text = check["verdict_text"] + (" (exploratory)" if finding.get("exploratory") else "")
        lines.append(
            f"| {suite} | {finding['claim']} | {check['model']} | {check['n']} "
            f"| {check['signs'][0]}/{check['signs'][1]} | {shown} "
            f"| {_state(record, check['verdict'])} | {text} | {kept} |"
        )
        counts[_kind(finding, check, record)] += 1
        apart["exploratory (counted above too)"] += bool(finding.get("exploratory"))
        apart["decided but not surviving the page family"] += kept == "does not survive"
    total = len(rows)
    listed = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()) if n)
    among = ", ".join(f"{n} {kind}" for kind, n in sorted(apart.items()) if n)
    return "\n".join([*lines, "", f"{total} checks: {listed}; among them {among}"])


def _state(record: dict[str, Any], verdict: str) -> str:
    """How a check's seeds stopped (decided, futile, max, open; none added to a check not
    tested, as the rule adds none), with its missing pairs."""
    from harness.claims.sequential import SequentialCheck, missing_pairs

    state = record.get("stopped") or ("no seeds added" if verdict == "not tested" else "open")
    missing = missing_pairs(SequentialCheck(**record)) if record else ""
    return f"{state} ({missing})" if missing else state


def _raw_p(finding: dict[str, Any], check: dict[str, Any]) -> float | None:
    """A directional check's unadjusted p (the sequential rule's, else the fixed design's)."""
    if finding["direction"] == "tie" or check["verdict"] == "not tested":
        return None
    record = check.get("sequential")
    return record.get("p_raw") if record else check.get("p_raw")


def _kind(finding: dict[str, Any], check: dict[str, Any], record: dict[str, Any]) -> str:
    """What a check's verdict is, for the counts: decided (between trained models, or against
    an arm that does not train), not reproduced at this scale, untestable at this scale (its
    max seeds could not have decided it), not tested, or undecided (open, futile or at max;
    with the claim's scope note where it has one)."""
    from harness.claims.verdicts import NOT_AT_SCALE, STOPPED_WORDS, UNTESTABLE, UNTRAINED

    text = check["verdict_text"]
    if check["verdict"] in ("reproduced", "contradicted"):
        return "decided" + (" against an arm that does not train" if UNTRAINED in text else "")
    if check["verdict"] == "not tested":
        return "not tested (degenerate)"
    if text.startswith(NOT_AT_SCALE):
        return f"{NOT_AT_SCALE} (the interval excludes the paper's effect)"
    scope = " (with a scope note)" if finding.get("scope") else ""
    if text.startswith(UNTESTABLE):
        return f"{UNTESTABLE} (max seeds could not decide it){scope}"
    state = STOPPED_WORDS.get(record.get("stopped") or "", "open")
    return f"undecided, {state}{scope}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--findings-verdicts", action="store_true")
    parser.add_argument("--db")
    parser.add_argument("--suite")
    parser.add_argument("--metric", help="required except with --layers")
    parser.add_argument("--by")
    parser.add_argument("--methods", nargs="+")
    parser.add_argument("--sweep", metavar="FIELD")
    parser.add_argument("--layers", metavar="STAT")
    parser.add_argument("--task")
    parser.add_argument("--model")
    args = parser.parse_args()
    if args.findings_verdicts:
        print(findings_verdicts())
    elif not (args.db and args.suite):
        parser.error("--db and --suite are required except with --findings-verdicts")
    elif args.layers and args.task and args.model and args.methods:
        layers = layer_table(args.db, args.suite, args.layers, args.task, args.model, args.methods)
        print(table_md(layers))
    elif not args.metric:
        parser.error("--metric is required except with --layers")
    elif args.sweep:
        print(table_md(sweep_table(args.db, args.suite, args.metric, args.sweep)))
    elif args.by and args.methods:
        print(table_md(table(args.db, args.suite, args.metric, args.by, args.methods)))
    else:
        parser.error(
            "give --sweep FIELD, --by and --methods, or --layers, --task, --model and --methods"
        )


if __name__ == "__main__":
    main()
