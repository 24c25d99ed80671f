"""Trial start-up: where the wall time of a 1-step trial goes, and 1 vs 2 workers.

    .venv/bin/python -m benchmarks.trial_startup [--repeats 5] [--trials 8]

Start-up: a fresh Python process (as the runner starts one per trial) runs a 1-step quickstart
trial and stamps each phase: process start (until the child's first line runs), imports (the
trial module with torch and transformers), data load (the task), model build (model, optimizer,
schedule) and the first optimizer step. Medians of `repeats` processes.

Scaling: the quickstart model trained for 20 steps, `trials` trials (seeds), run by `layerbench run`
with 1 and then 2 workers into fresh SQLite databases; trials per hour from the suite's wall time.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

PHASES = ("process start", "imports", "data load", "model build", "first step")

CHILD = """
import json, sys, time
marks = [time.time()]
import torch
from harness.registry import MODELS, TASKS
from harness.runner import trial as t
marks.append(time.time())
config = json.loads(sys.argv[1])
settings = t.prepare(config)
entry = TASKS.entry(config["task"]["type"])
task = entry.obj(entry.params.model_validate(config["task"]))
marks.append(time.time())
built = t.build(config, settings)
marks.append(time.time())
batch = next(built.task.train_batches(settings.train.batch_size, torch.Generator()))
t.train_step(built, batch, torch.amp.GradScaler("cpu", enabled=False))
marks.append(time.time())
print(json.dumps(marks))
"""

SUITE = {
    "suite": "startup-bench",
    "defaults": {
        "train": {"steps": 20, "batch_size": 16, "eval_every": 20, "eval_batches": 2},
        "optimizer": {"name": "adamw", "lr": 3e-3},
    },
    "models": {"gpt-4l": {"type": "gpt", "n_layers": 4, "d_model": 64, "n_heads": 4}},
    "tasks": {"shakespeare": {"type": "lm", "corpus": "shakespeare", "tokenizer": "byte"}},
    "methods": {"pre-ln": {}},
    "baseline": "pre-ln",
    "rank": {"metric": "val_loss"},
}


def trial_config() -> dict:
    from harness.spec.schema import TrialSettings

    settings = {"train": {"steps": 1, "batch_size": 16}, "optimizer": {"name": "adamw"}}
    dumped = TrialSettings.model_validate(settings).model_dump(mode="json")
    return {
        **dumped,
        "seed": 0,
        "model": SUITE["models"]["gpt-4l"],
        "task": SUITE["tasks"]["shakespeare"],
    }


def startup_phases(config: dict) -> list[float]:
    """Seconds spent in each phase of one fresh trial process."""
    started = time.time()
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(config)],
        capture_output=True,
        text=True,
        check=True,
    )
    marks = [started, *json.loads(out.stdout.splitlines()[-1])]
    return [after - before for before, after in itertools.pairwise(marks)]


def suite_wall_s(workers: int, n_trials: int, folder: Path) -> float:
    suite = {**SUITE, "seeds": list(range(n_trials))}
    path = folder / f"startup-{workers}.yaml"
    path.write_text(yaml.safe_dump(suite))
    command = [
        str(Path(sys.executable).with_name("layerbench")),
        "run",
        str(path),
        "--workers",
        str(workers),
        "--no-mlflow",
        "--db",
        f"sqlite:///{folder / f'startup-{workers}.db'}",
    ]
    started = time.perf_counter()
    subprocess.run(command, capture_output=True, check=True, env={**os.environ, "COLUMNS": "200"})
    return time.perf_counter() - started


def main(repeats: int, n_trials: int) -> None:
    config = trial_config()
    runs = [startup_phases(config) for _ in range(repeats)]
    print(f"1-step trial in a fresh process, medians of {repeats}:")
    for name, values in zip(PHASES, zip(*runs, strict=True), strict=True):
        print(f"  {name:14s} {statistics.median(values):.3f} s")
    print(f"  {'total':14s} {statistics.median(sum(run) for run in runs):.3f} s")
    with tempfile.TemporaryDirectory() as folder:
        for workers in (1, 2):
            wall = suite_wall_s(workers, n_trials, Path(folder))
            rate = 3600 * n_trials / wall
            print(f"{workers} worker(s): {n_trials} trials in {wall:.1f} s, {rate:.0f} trials/hour")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--trials", type=int, default=8)
    arguments = parser.parse_args()
    main(arguments.repeats, arguments.trials)
