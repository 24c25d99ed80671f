"""CLI start-up: `layerbench plan` of a 1,000-trial suite with every result stored, and `--help`.

    .venv/bin/python -m benchmarks.cli_startup [--repeats 5]

Writes a 1,000-trial suite (the quickstart's model and task, 5 methods x 200 seeds) and a SQLite
database holding a finished result for every one of its trials (`tests.factories.store_bulk`, under
the keys `plan` computes), both cached under /tmp. Then times, interleaved and as medians of
fresh processes (wall time, end to end, as a user runs them):

- `layerbench plan SUITE --db URL` (loads and validates the suite, plans it, reads every status
  and outcome, prints 1,000 lines to a pipe);
- `layerbench --help` and `layerbench run --help` (a subcommand's help: the group callback runs
  first);
- for scale, in the same run: `python -c pass`, `python -c "import typer"` (the floor of any
  Typer command's start-up) and `python -c "import torch"` (what importing torch alone costs on
  this machine).

Which heavy modules `plan` imports is printed too (torch, transformers, mlflow in `sys.modules`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from harness.core import Status
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from harness.store.db import make_engine, upgrade
from tests.factories import fake_result, store_bulk

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SEEDS = 200
METHODS = {
    "pre-ln": {},
    "post-ln": {"norm": {"placement": "post"}},
    "pre-rmsnorm": {"norm": {"type": "rmsnorm"}},
    "post-rmsnorm": {"norm": {"placement": "post", "type": "rmsnorm"}},
    "pre-ln-low-lr": {"optimizer": {"lr": 1.0e-3}},
}
HEAVY = ("torch", "transformers", "mlflow")
IMPORTS = """
import sys
from typer.testing import CliRunner
from harness.cli import app
result = CliRunner().invoke(app, ["plan", sys.argv[1], "--db", sys.argv[2]])
assert result.exit_code == 0, result.output
print([name for name in {heavy} if name in sys.modules])
"""


def suite_file(directory: Path) -> Path:
    """The quickstart suite with 5 methods and 200 seeds: 1,000 trials."""
    spec = yaml.safe_load((ROOT / "suites" / "quickstart.yaml").read_text())
    spec |= {"suite": "plan-bench", "seeds": list(range(SEEDS)), "methods": METHODS}
    path = directory / "plan-bench.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def store_all(path: Path, url: str) -> None:
    """A finished fake result for every trial of the suite, under the keys `plan` computes."""
    engine = make_engine(url)
    upgrade(engine)
    rng = np.random.default_rng(0)
    trials = plan_suite(load_suite(path))
    results = [(t, fake_result(Status.DONE, 1.6 + rng.normal(0, 0.02), rng)) for t in trials]
    store_bulk(engine, results)


def wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/cli-startup-bench"))
    args = parser.parse_args()
    args.dir.mkdir(exist_ok=True)
    suite = suite_file(args.dir)
    database = args.dir / "results.db"
    url = f"sqlite:///{database}"
    if not database.exists():
        store_all(suite, url)
    python, layerbench = str(BIN / "python"), str(BIN / "layerbench")
    commands = {
        "layerbench plan (1,000 trials, all stored)": [layerbench, "plan", str(suite), "--db", url],
        "layerbench --help": [layerbench, "--help"],
        "layerbench run --help": [layerbench, "run", "--help"],
        'python -c "import typer"': [python, "-c", "import typer"],
        'python -c "import torch"': [python, "-c", "import torch"],
        "python -c pass": [python, "-c", "pass"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for command in commands.values():  # warm the file cache once
        wall(command)
    for _ in range(args.repeats):  # interleaved, so the machine's load hits each alike
        for name, command in commands.items():
            times[name].append(wall(command))
    heavy = subprocess.run(
        [python, "-c", IMPORTS.format(heavy=HEAVY), str(suite), url],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    print(f"heavy modules imported by `plan`: {heavy}")
    print("| command | median (s) | all runs (s) |\n|---|---|---|")
    for name, runs in times.items():
        print(f"| {name} | {statistics.median(runs):.2f} | {', '.join(f'{t:.2f}' for t in runs)} |")
    print(json.dumps({name: statistics.median(runs) for name, runs in times.items()}))


if __name__ == "__main__":
    main()
