"""Trial start-up: where the wall time of a 1-step trial goes, warm and cold, and 1 vs 2 workers.

    .venv/bin/python -m benchmarks.trial_startup [--repeats 5] [--trials 8] [--marginal 2,10]
        [--backends local,ray] [--no-scaling]

Reference, measured in the same run: `python -c "import torch, transformers"` (medians).

Cold start-up: a fresh Python process runs a 1-step quickstart trial and stamps each phase:
process start (until the child's first line runs), imports (the trial module with torch and
transformers), data load (the task), model build (model, optimizer, schedule) and the first
optimizer step. Warm start-up: the same phases in a process forked from the runner's warmed
fork server (`harness.runner.warm`), as the local runner starts each trial, plus a second step.
Medians of `repeats` processes.

Model build: `gpt` with 12 layers, width 64 (model, optimizer and schedule, as `build` makes
them) in a warm process, median of `repeats` (at least 5), wall and CPU time (the CPU time is
what a loaded machine inflates least).

Marginal trial: `layerbench run` (1 worker, no MLflow) of a suite of 1-step trials with the
smaller and then the larger number of seeds in `--marginal`, alternating, `repeats` times; the
difference of the median wall times divided by the difference of the trial counts is what one
more trial costs inside a suite. With `--backends local,ray` the same for each backend: on Ray
(a local instance with 1 CPU, started here as the tests start theirs, so one trial at a time)
the worker that runs the first trial starts a warm fork server, and each later trial is forked
from it, so the marginal cost is a forked trial's, as on the local backend.

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
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import yaml

PHASES = ("process start", "imports", "data load", "model build", "first step")
ROOT = Path(__file__).resolve().parents[1]
WARM_PHASES = ("fork", "prepare", "data + model build", "first step", "second step")

CHILD = """
import json, sys, time
marks = [time.time()]
import torch
from harness.registry import MODELS, TASKS
from harness.runner import trial as t
marks.append(time.time())
config = json.loads(sys.argv[1])
recipe = t.prepare(config)
_, entry = recipe.trained_entries()
task = t.train_task(entry, recipe.task)
marks.append(time.time())
built = t.build(recipe)
marks.append(time.time())
batch = next(built.task.train_batches(recipe.train.batch_size, torch.Generator()))
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


def trial_config(model: dict[str, Any] | None = None) -> dict[str, Any]:
    from harness.spec.schema import TrialSettings

    settings = {
        "device": "cpu",
        "train": {"steps": 1, "batch_size": 16},
        "optimizer": {"name": "adamw"},
    }
    dumped = TrialSettings.model_validate(settings).model_dump(mode="json")
    return {
        **dumped,
        "seed": 0,
        "model": model or SUITE["models"]["gpt-4l"],
        "task": SUITE["tasks"]["shakespeare"],
    }


def startup_phases(config: dict[str, Any]) -> list[float]:
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


def import_seconds() -> float:
    """`python -c "import torch, transformers"` in a fresh process (the reference)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, transformers"], check=True)
    return time.perf_counter() - started


def warm_child(conn: Any, config: dict[str, Any], started: float) -> None:
    """Runs in a process forked from the warm fork server: the phases of a 1-step trial."""
    import torch

    from harness.runner import trial as t

    torch.set_num_threads(1)
    marks = [started, time.time()]
    recipe = t.prepare(config)
    marks.append(time.time())
    built = t.build(recipe)
    marks.append(time.time())
    batches = built.task.train_batches(recipe.train.batch_size, torch.Generator())
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    for _ in range(2):
        t.train_step(built, next(batches), scaler)
        marks.append(time.time())
    conn.send([after - before for before, after in itertools.pairwise(marks)])


def build_child(conn: Any, config: dict[str, Any], repeats: int) -> None:
    """Runs in a warm process: seconds to build the model, optimizer and schedule."""
    import torch

    from harness.runner import trial as t

    torch.set_num_threads(1)
    recipe = t.prepare(config)
    times, cpu = [], []
    for _ in range(repeats):
        started, cpu_started = time.perf_counter(), time.process_time()
        t.build(recipe)
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
    conn.send((times, cpu))


def in_warm_process(target: Any, *args: Any) -> Any:
    """Run `target(conn, *args)` in a process forked from the runner's warm fork server."""
    from harness.runner.local import context

    ctx = context()
    receiver, sender = ctx.Pipe(duplex=False)
    process = ctx.Process(target=target, args=(sender, *args))
    process.start()
    sender.close()
    answer = receiver.recv()
    process.join()
    return answer


def start_warm_server(config: dict[str, Any]) -> float:
    """Start the runner's fork server warmed for `config`'s task; returns the seconds it took."""
    from harness.records import PlannedTrial
    from harness.runner.local import context
    from harness.runner.warm import start_server
    from harness.spec.recipe import load_recipe

    context()
    trial = PlannedTrial("bench", "bench", "m", "gpt", "t", 0, {}, load_recipe(config))
    started = time.perf_counter()
    start_server([trial])
    in_warm_process(ready)  # the server answers once its preload (and warm-up) is done
    return time.perf_counter() - started


def ready(conn: Any) -> None:
    conn.send(True)


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


def suite_seconds(n_trials: int, folder: Path, ray_address: str | None = None) -> float:
    """Wall time of `layerbench run` on a suite of `n_trials` 1-step trials, 1 worker (or on the
    Ray at `ray_address`)."""
    suite = {
        **SUITE,
        "suite": f"marginal-{n_trials}",
        "seeds": list(range(n_trials)),
        "defaults": {**SUITE["defaults"], "train": {**SUITE["defaults"]["train"], "steps": 1}},
    }
    path = folder / f"marginal-{n_trials}.yaml"
    path.write_text(yaml.safe_dump(suite))
    database = folder / f"marginal-{n_trials}.db"
    database.unlink(missing_ok=True)
    command = [
        sys.executable, "-m", "harness", "run", str(path), "--workers", "1", "--no-mlflow",
        "--db", f"sqlite:///{database}",
    ]  # fmt: skip
    if ray_address is not None:
        command += ["--backend", "ray", "--ray-address", ray_address]
    started = time.perf_counter()
    subprocess.run(command, capture_output=True, check=True, env={**os.environ, "COLUMNS": "200"})
    return time.perf_counter() - started


@contextmanager
def local_ray() -> Iterator[str]:
    """A local Ray with 1 CPU (no dashboard, no usage stats, no token auth, loopback), as
    tests/test_ray.py starts one; yields its address."""
    import ray

    os.environ.update(
        RAY_USAGE_STATS_ENABLED="0",
        RAY_AUTH_MODE="disabled",
        HF_HUB_OFFLINE="1",
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    )
    context = ray.init(
        address="local",
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        _node_ip_address="127.0.0.1",
    )
    try:
        yield context.address_info["gcs_address"]
    finally:
        ray.shutdown()


def median_line(name: str, values: list[float]) -> str:
    runs = ", ".join(f"{value:.3f}" for value in values)
    return f"  {name:22s} {statistics.median(values):.3f} s ({runs})"


def marginal_trial(
    backend: str, sizes: tuple[int, int], repeats: int, folder: Path, reference: float
) -> None:
    """One more 1-step trial's wall time inside a suite run on `backend` (see the module doc)."""
    small, large = sizes
    walls: dict[int, list[float]] = {small: [], large: []}
    with local_ray() if backend == "ray" else nullcontext(None) as address:
        for _ in range(repeats):
            for count in (small, large):
                walls[count].append(suite_seconds(count, folder, address))
    print(f"{backend} backend:")
    for count, values in walls.items():
        print(median_line(f"suite of {count} trials", values))
    extra = statistics.median(walls[large]) - statistics.median(walls[small])
    per_trial = extra / (large - small)
    ratio = per_trial / reference
    print(f"  marginal 1-step trial  {per_trial:.3f} s = {ratio:.3f} x import torch, transformers")


def main(
    repeats: int,
    n_trials: int,
    marginal: tuple[int, int],
    scaling: bool,
    backends: tuple[str, ...] = ("local",),
) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average {os.getloadavg()}")
    config = trial_config()
    server_s = start_warm_server(config)
    print(f"warm fork server start (imports, tasks, warm-up step): {server_s:.2f} s")
    reference, cold, warm = [], [], []
    for _ in range(repeats):
        reference.append(import_seconds())
        cold.append(startup_phases(config))
        warm.append(in_warm_process(warm_child, config, time.time()))
    print("reference:", median_line("import torch, transformers", reference).strip())
    print(f"1-step trial in a fresh process (cold), medians of {repeats}:")
    for name, values in zip(PHASES, zip(*cold, strict=True), strict=True):
        print(median_line(name, list(values)))
    print(median_line("total", [sum(run) for run in cold]))
    print(f"1-step trial forked from the warm fork server, medians of {repeats}:")
    for name, values in zip(WARM_PHASES, zip(*warm, strict=True), strict=True):
        print(median_line(name, list(values)))
    print(median_line("total to first step", [sum(run[:4]) for run in warm]))
    model = {"type": "gpt", "n_layers": 12, "d_model": 64, "n_heads": 4}
    builds, cpu = in_warm_process(build_child, trial_config(model), max(repeats, 5))
    print(median_line("build gpt 12 x 64", builds))
    print(median_line("  its CPU time", cpu))
    with tempfile.TemporaryDirectory() as folder:
        for backend in backends:
            marginal_trial(backend, marginal, repeats, Path(folder), statistics.median(reference))
        if scaling:
            for workers in (1, 2):
                wall = suite_wall_s(workers, n_trials, Path(folder))
                rate = 3600 * n_trials / wall
                print(f"{workers} worker(s): {n_trials} trials in {wall:.1f} s, {rate:.0f}/hour")
    print(f"{time.strftime('%H:%M:%S')}, load average {os.getloadavg()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--marginal", default="2,10", help="the two suite sizes, in trials")
    parser.add_argument("--no-scaling", action="store_true", help="skip 1 vs 2 workers")
    parser.add_argument("--backends", default="local", help="local, ray or both: local,ray")
    arguments = parser.parse_args()
    small, large = (int(n) for n in arguments.marginal.split(","))
    backends = tuple(arguments.backends.split(","))
    main(arguments.repeats, arguments.trials, (small, large), not arguments.no_scaling, backends)
