"""Do the paired trials of a compression suite compress the same trained model?

A pruning or quantization comparison pairs two methods on one seed, each trial training its own
copy of the model before compressing it: the pairing assumes the two copies are the same model.
This prints, per (model, seed), the two trials' validation loss before compression (the last
point of their training series), its gap, and the compressed difference method - than:

    python -m benchmarks.pair_models docs/results/data/findings-shortgpt.db bi-3 random-3

A gap of 0 means the same model (trained in one session, same key and threads: identical to the
last digit); trials trained in different sessions have been seen to differ (docs/results/
findings.md, "Trained models across sessions"). Only trials whose config has `draws` when
`--draws` is given (the random baseline averaged over draws), else those without it.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from collections import defaultdict


def pairs(
    path: str, method: str, than: str, draws: bool
) -> list[tuple[str, int, float, float, str]]:
    """(model, seed, training gap, compressed difference, sessions) per seed both methods ran."""
    found: dict[tuple[str, int], dict[str, tuple[float, float, str]]] = defaultdict(dict)
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "select id, method, model, seed, config, started_at from trials "
            "where status = 'done' and method in (?, ?)",
            (method, than),
        ).fetchall()
        for trial, name, model, seed, config, started in rows:
            if name == than and ("draws" in json.dumps(json.loads(config))) != draws:
                continue
            (trained,) = db.execute(
                "select value from metric_series where trial_id = ? and name = 'val_loss' "
                "order by step desc limit 1",
                (trial,),
            ).fetchone()
            (final,) = db.execute(
                "select value from results where trial_id = ? and name = 'val_loss'", (trial,)
            ).fetchone()
            found[(model, seed)][name] = (trained, final, started[:10])
    return [
        (
            model,
            seed,
            got[method][0] - got[than][0],
            got[method][1] - got[than][1],
            f"{got[method][2]} / {got[than][2]}",
        )
        for (model, seed), got in sorted(found.items())
        if method in got and than in got
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", help="a SQLite database of a compression suite")
    parser.add_argument("method")
    parser.add_argument("than")
    parser.add_argument("--draws", action="store_true", help="`than` averaged over draws")
    args = parser.parse_args()
    print("| model | seed | trained val_loss gap | compressed difference | started |")
    print("|---|---:|---:|---:|---|")
    for model, seed, gap, diff, started in pairs(args.db, args.method, args.than, args.draws):
        print(f"| {model} | {seed} | {gap:+.4f} | {diff:+.4f} | {started} |")


if __name__ == "__main__":
    main()
