"""Suite overhead: a suite's wall time over the time its trials spent training and evaluating.

    .venv/bin/python -m benchmarks.suite_overhead [--suite suites/quickstart.yaml] [--workers 2]
        [--mlflow] [--repeats 1]

Runs `layerbench run` (no MLflow; with `--mlflow`, into a fresh SQLite MLflow store, as `make
demo` runs it) on the suite into a fresh SQLite database, `repeats` times, and prints
wall / (sum over trials of train + eval time / workers), the issue-23 figure (goal <= 1.10 for
the quickstart suite), beside the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine, select

from harness.store.models import Trial


def overhead(suite: Path, workers: int, mlflow: bool) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'overhead.db'}"
        command = [sys.executable, "-m", "harness", "run", str(suite), "--workers", str(workers)]
        command += ["--db", url] + ([] if mlflow else ["--no-mlflow"])
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{Path(folder) / 'mlflow.db'}"}
        started = time.perf_counter()
        subprocess.run(command, capture_output=True, check=True, env=env, cwd=folder)
        wall = time.perf_counter() - started
        with create_engine(url).connect() as connection:
            rows = connection.execute(select(Trial.train_time_s, Trial.eval_time_s)).all()
    busy = sum(train + evaluation for train, evaluation in rows)
    print(f"{suite}: {len(rows)} trials, {workers} workers, wall {wall:.1f} s")
    print(f"  train + eval, summed: {busy:.1f} s; per worker {busy / workers:.1f} s")
    print(f"  overhead (wall / per-worker train + eval): {wall / (busy / workers):.3f}")
    print(f"{time.strftime('%H:%M:%S')}, load average {os.getloadavg()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", type=Path, default=Path("suites/quickstart.yaml"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--mlflow", action="store_true", help="track in a fresh MLflow store")
    parser.add_argument("--repeats", type=int, default=1)
    arguments = parser.parse_args()
    for _ in range(arguments.repeats):
        overhead(arguments.suite.resolve(), arguments.workers, arguments.mlflow)
