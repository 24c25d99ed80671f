"""The summary table of docs/results/findings.md: every claim of suites/findings/ under sequential
seeds, beside its verdict under the earlier fixed design.

    python -m benchmarks.findings_summary --old-suites 0f73d7c --old-dbs a837530

Each suite is ranked by `layerbench rank --format json` twice: the rerun (the suite file as it is
now, docs/results/data/findings-NAME.db or `--db-dir`) and the fixed-design run (the suite file
and database of the given commits). Claims are matched by (method, than); a claim the earlier
suite did not have says so. Nothing here computes a statistic: every figure is read from the rank
JSON, so the table quotes what `layerbench rank` prints.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from harness.claims.sequential import SequentialCheck, missing_pairs, verdict_note
from harness.claims.verdicts import UNTESTABLE

ROOT = Path(__file__).resolve().parents[1]

SUITES = (
    "postln-warmup",
    "peri-ln",
    "curse-of-depth",
    "mix-ln",
    "shortgpt",
    "layerwise-quant",
    "muon",
    "rmsnorm",
    "dyt-derf",
)
DECIDED = ("reproduced", "contradicted", "flipped")


def rank(suite: Path, db: Path, form: str) -> str:
    """`layerbench rank SUITE --format FORM` on the SQLite database `db`."""
    command = ["layerbench", "rank", str(suite), "--db", f"sqlite:///{db}", "--format", form]
    return subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT).stdout


def ranked(suite: Path, db: Path) -> list[dict[str, Any]]:
    """The `findings` of `layerbench rank SUITE --format json` on the SQLite database `db`."""
    return json.loads(rank(suite, db, "json"))["findings"]


def from_git(rev: str, path: str, into: Path) -> Path:
    """The file `path` at commit `rev`, written to `into`."""
    into.write_bytes(
        subprocess.run(
            ["git", "show", f"{rev}:{path}"], capture_output=True, check=True, cwd=ROOT
        ).stdout
    )
    return into


def check_text(check: dict[str, Any]) -> str:
    """One recipe's verdict: "gpt-8l: reproduced (-0.33 [-0.44, -0.22])" plus its notes."""
    low, high = check["sequential"]["interval"] if check.get("sequential") else (None, None)
    interval = "" if low is None or high is None else f" [{low:+.3g}, {high:+.3g}]"
    delta = "" if check["delta"] is None else f" ({check['delta']:+.3g}{interval})"
    notes = [n for n in (check.get("annotation"), check.get("needed_note")) if n]
    untestable = check["verdict_text"].startswith(UNTESTABLE)  # it states what max detects
    if (seq := check.get("sequential")) and (
        note := verdict_note(SequentialCheck(**seq), not untestable)
    ):
        notes.append(note)
    tail = f"; {'; '.join(notes)}" if notes else ""
    return f"{check['model']}: {check['verdict_text']}{delta}{tail}"


def seeds_text(finding: dict[str, Any]) -> str:
    """How the claim's seeds ended, per recipe: "n = 6, 2 looks, decided"."""
    parts = []
    for check in finding["checks"]:
        seq = check.get("sequential")
        if seq is None:
            parts.append(f"{check['model']}: n = {check['n']} (not tested: no seeds added)")
            continue
        state = seq["stopped"] or "open (more seeds would be added)"
        looks = f"{seq['looks']} look{'s' if seq['looks'] != 1 else ''}"
        missing = missing_pairs(SequentialCheck(**seq))
        state += f" ({missing})" if missing else ""
        parts.append(f"{check['model']}: n = {seq['n']}, {looks}, {state}")
    return "; ".join(parts)


def cpu_minutes(finding: dict[str, Any]) -> float:
    """CPU-minutes of the trials behind the claim (every sweep point of both methods)."""
    return sum((c.get("sequential") or {}).get("cpu_s", 0.0) for c in finding["checks"]) / 60


def trial_counts(db: Path, old_db: Path) -> tuple[int, int]:
    """(trials of `db` reused from the fixed-design run `old_db`, trials the rerun trained). A
    trial is reused when `old_db` holds the same key started at the same time (the stored row
    copied over); a key both hold with another start time was trained again (with the same
    numbers: the key fixes them), so it counts as trained."""
    runs = [
        dict(sqlite3.connect(d).execute("SELECT key, started_at FROM trials")) for d in (db, old_db)
    ]
    reused = sum(runs[1].get(key) == started for key, started in runs[0].items())
    return reused, len(runs[0]) - reused


def table(db_dir: Path, old_suites: str, old_dbs: str) -> list[str]:
    """The markdown summary: a row per claim, then the counts."""
    lines = [
        "| suite | claim | verdict per recipe (Δ [interval of the rule's looks]) | seeds | CPU-min"
        " | claim verdict | fixed design (earlier run) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    verdicts: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name in SUITES:
            old_suite = from_git(
                old_suites, f"suites/findings/{name}.yaml", Path(tmp, f"{name}.yaml")
            )
            old_db = from_git(
                old_dbs, f"docs/results/data/findings-{name}.db", Path(tmp, f"{name}.db")
            )
            old = {(f["method"], f["than"]): f["verdict_text"] for f in ranked(old_suite, old_db)}
            db = db_dir / f"findings-{name}.db"
            for finding in ranked(ROOT / "suites" / "findings" / f"{name}.yaml", db):
                verdicts[finding["verdict"]] += 1
                earlier = old.get((finding["method"], finding["than"]), "(a new claim)")
                recipes = "<br>".join(check_text(c) for c in finding["checks"])
                lines.append(
                    f"| `{name}` | {finding['claim']} | {recipes} | {seeds_text(finding)} | "
                    f"{cpu_minutes(finding):.0f} | **{finding['verdict_text']}** | {earlier} |"
                )
            reused, trained = trial_counts(db, old_db)
            lines.append(
                f"| `{name}` | (trials: {reused} reused from the fixed-design run, "
                f"{trained} trained by the rerun) | | | | | |"
            )
    total = sum(verdicts.values())
    decided = sum(verdicts[v] for v in DECIDED)
    counts = ", ".join(f"{n} {v}" for v, n in verdicts.most_common())
    lines += ["", f"Decided {decided} of {total} claims ({counts})."]
    return lines


def sections(db_dir: Path) -> list[str]:
    """Per suite: the command and the `layerbench rank --format md` output of the rerun."""
    lines = []
    for name in SUITES:
        suite, db = f"suites/findings/{name}.yaml", db_dir / f"findings-{name}.db"
        lines += [
            f"## Results: `{name}.yaml`",
            "",
            "```sh",
            f"python benchmarks/findings_rerun.py {suite} \\",
            f"    --reuse <the fixed-design run> --db docs/results/data/findings-{name}.db",
            f"layerbench rank {suite} --format md --db sqlite:///docs/results/data/findings-{name}.db",
            "```",
            "",
            rank(ROOT / suite, db, "md").strip(),
            "",
        ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db-dir", type=Path, default=ROOT / "docs" / "results" / "data")
    parser.add_argument(
        "--old-suites", required=True, help="commit of the fixed-design suite files"
    )
    parser.add_argument("--old-dbs", required=True, help="commit of the fixed-design databases")
    parser.add_argument("--sections", action="store_true", help="also each suite's rank tables")
    args = parser.parse_args()
    lines = table(args.db_dir, args.old_suites, args.old_dbs)
    print("\n".join(lines + (["", *sections(args.db_dir)] if args.sections else [])))


if __name__ == "__main__":
    main()
