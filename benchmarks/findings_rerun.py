"""Rerun a findings suite with sequential seeds, reusing the trials a stored run already has.

    python benchmarks/findings_rerun.py suites/findings/muon.yaml \
        --reuse docs/results/data/findings-muon.db --db /tmp/findings-muon.db

A trial's key is a hash of everything that decides its numbers (SPEC 6; `layerbench versions`),
and on the CPU the same key gives the same metrics to the last digit (tests/test_runner.py; a
reused trial is checked against a fresh run of it in docs/results/findings.md), so a trial
stored under that key by an earlier run is the trial the rerun would compute. This script
replays the sequential rule (`harness.service.rounds`) on such a stored run: it starts from the
stored trials with seeds below `initial`, and, when the stored run has all of them, at each look
takes the seeds the open comparisons ask for from the stored run while it has them. It then
copies the stored run to `--db`, keeps only the trials of that replayed path (so no seed the
rule would not have run is ranked), and hands over to `layerbench run`, whose sequential rule
continues from there and trains what the stored run lacks. The verdicts are those of a
sequential run from scratch; only the CPU time is saved (each reused trial keeps its stored train
and wall time). A trial the run asks for after the replay is trained again even when the stored
run has it (the same numbers, as checked above).
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from sqlalchemy import create_engine

from harness.core import TrialOutcome
from harness.ranking.suite import plan_of
from harness.service.rounds import look, wanted_trials
from harness.spec.check import load_suite
from harness.spec.plan import plan_suite
from harness.spec.schema import Suite
from harness.store.queries import stored_outcomes

CHILD_TABLES = ("results", "metric_series", "layer_stats", "example_outcomes")


def replayed_keys(suite: Suite, reuse: Path) -> set[str]:
    """The stored trials a sequential run of `suite` would have run, as far as `reuse` has them."""
    schedule = suite.schedule
    if schedule is None:
        raise SystemExit(f"{suite.suite}: `seeds` is a fixed list; give it {{initial, max, step}}")
    planned = plan_suite(suite)
    keys = [t.key for t in planned]
    pool: dict[str, TrialOutcome] = {
        o.key: o for o in stored_outcomes(create_engine(f"sqlite:///{reuse}"), keys)
    }
    plan = plan_of(suite, keys)
    initial = {t.key for t in planned if t.seed < schedule.initial}
    taken = initial & pool.keys()
    if taken != initial:  # a look needs every initial seed: `layerbench run` trains them first
        return taken
    while True:
        found = look(plan, schedule, [pool[k] for k in taken])
        more = {t.key for t in wanted_trials(found, planned) if t.key in pool} - taken
        if not more:
            return taken
        taken |= more


def keep_only(db: Path, keys: set[str]) -> int:
    """Delete every trial of `db` not in `keys` (with its rows in the child tables)."""
    with sqlite3.connect(db) as connection:
        dropped = [
            row[0] for row in connection.execute("SELECT id, key FROM trials") if row[1] not in keys
        ]
        for table in CHILD_TABLES:
            connection.executemany(
                f"DELETE FROM {table} WHERE trial_id = ?", [(i,) for i in dropped]
            )
        connection.executemany("DELETE FROM trials WHERE id = ?", [(i,) for i in dropped])
    return len(dropped)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", type=Path)
    parser.add_argument("--reuse", type=Path, required=True, help="the stored run (SQLite)")
    parser.add_argument("--db", type=Path, required=True, help="the rerun's database (SQLite)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--replay-only",
        action="store_true",
        help="write the replayed path to --db and train nothing (the open comparisons stay open)",
    )
    args = parser.parse_args()
    suite = load_suite(args.suite)
    keys = replayed_keys(suite, args.reuse)
    shutil.copyfile(args.reuse, args.db)
    dropped = keep_only(args.db, keys)
    print(f"{suite.suite}: {len(keys)} stored trials on the replayed path, {dropped} left out")
    if args.replay_only:
        return
    command = ["layerbench", "run", str(args.suite), "--db", f"sqlite:///{args.db}"]
    sys.exit(subprocess.call([*command, "--workers", str(args.workers)]))


if __name__ == "__main__":
    main()
