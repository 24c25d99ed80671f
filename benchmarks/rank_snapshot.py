"""Snapshot of `layerbench rank` on the committed result databases (issue 25: "every rendered
table is unchanged").

    python benchmarks/rank_snapshot.py           # compare with tests/data/rank_snapshot/
    python benchmarks/rank_snapshot.py --write   # record the current outputs as the snapshot

For every suite with a database in docs/results/data/ (suites/NAME.yaml <-> NAME.db,
suites/findings/NAME.yaml <-> findings-NAME.db) it runs `layerbench rank` in each format (table at
a fixed width, json, csv, md), plus the extra metrics the results docs rank by, on a temporary
COPY of the database (opening a database may upgrade its schema), and compares the text with the
recorded one. Read-only ranking: a few seconds. tests/test_rank_snapshot.py runs the comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "results" / "data"
SNAPSHOT = ROOT / "tests" / "data" / "rank_snapshot"
FORMATS = ("table", "json", "csv", "md")
# extra `--metric` rankings the results docs print (docs/results/compression.md)
EXTRA_METRICS = {"compression": ("bits_per_byte",)}


def suites() -> Iterator[tuple[Path, Path]]:
    """(suite file, committed database) pairs."""
    for path in sorted((ROOT / "suites").glob("*.yaml")):
        if (DATA / f"{path.stem}.db").exists():
            yield path, DATA / f"{path.stem}.db"
    for path in sorted((ROOT / "suites" / "findings").glob("*.yaml")):
        if (DATA / f"findings-{path.stem}.db").exists():
            yield path, DATA / f"findings-{path.stem}.db"


def outputs() -> dict[str, str]:
    """Snapshot file name -> the output of `layerbench rank`."""
    from harness.cli import app

    runner, found = CliRunner(), {}
    # an empty cache: what a fresh clone renders, whatever data this machine has installed
    # (compression's BIG-bench trials match only with `layerbench data install bigbench`)
    with (
        tempfile.TemporaryDirectory() as scratch,
        contextlib.chdir(ROOT),
        mock.patch.dict(os.environ, {"LAYERBENCH_CACHE": str(Path(scratch) / "cache")}),
    ):
        for suite, db in suites():
            copy = Path(scratch) / db.name
            shutil.copyfile(db, copy)
            name = db.stem
            for metric in (None, *EXTRA_METRICS.get(suite.stem, ())):
                for fmt in FORMATS:
                    args = ["rank", str(suite.relative_to(ROOT)), "--db", f"sqlite:///{copy}"]
                    args += ["--format", fmt] + (["--width", "160"] if fmt == "table" else [])
                    args += ["--metric", metric] if metric else []
                    result = runner.invoke(app, args)
                    label = f"{name}{'.' + metric if metric else ''}.{fmt}"
                    found[label] = f"exit {result.exit_code}\n{result.output}"
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="record the snapshot")
    args = parser.parse_args()
    current = outputs()
    if args.write:
        SNAPSHOT.mkdir(parents=True, exist_ok=True)
        for stale in SNAPSHOT.glob("*.txt"):
            stale.unlink()
        for label, text in current.items():
            (SNAPSHOT / f"{label}.txt").write_text(text)
        print(f"wrote {len(current)} outputs to {SNAPSHOT.relative_to(ROOT)}")
        return 0
    return report(differences(current))


JSON_DIGITS = 12
"""Significant digits of the JSON outputs' floats that are compared: the last few bits of a
float depend on the CPU's kernels (the findings' sequential intervals differ at 1e-15 between
an Intel and an AMD machine), the rendered tables do not."""


def comparable(label: str, text: str) -> str:
    """The output as compared: a JSON output's floats to `JSON_DIGITS` significant digits."""
    if not label.endswith(".json"):
        return text
    status, _, body = text.partition("\n")
    try:
        parsed = json.loads(body)
    except json.JSONDecodeError:
        return text
    return f"{status}\n{json.dumps(_rounded(parsed), indent=2)}\n"


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.{JSON_DIGITS}g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def differences(current: dict[str, str]) -> list[str]:
    """Unified diffs between the recorded snapshot and `current` (empty: identical up to
    `comparable`)."""
    recorded = {p.stem: p.read_text() for p in SNAPSHOT.glob("*.txt")}
    diffs = []
    for label in sorted(recorded.keys() | current.keys()):
        old = comparable(label, recorded.get(label, ""))
        new = comparable(label, current.get(label, ""))
        if old != new:
            diff = difflib.unified_diff(
                old.splitlines(), new.splitlines(), f"recorded/{label}", f"now/{label}", lineterm=""
            )
            diffs.append("\n".join(diff))
    return diffs


def report(diffs: list[str]) -> int:
    for diff in diffs:
        print(diff)
    print(f"{len(diffs)} outputs differ" if diffs else "rank outputs identical to the snapshot")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
