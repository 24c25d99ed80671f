"""The resume campaign of docs/reliability.md (issue 39): `kill -9` of the runner or of the trial
process at random moments of multi-checkpoint trials, then an audit against an uninterrupted run.

    python benchmarks/reliability.py resume --db sqlite|postgresql --kills 20

Each cycle reruns one unfinished trial of the suite (`--only`, `--retry-failed`: a killed trial
process leaves its trial `failed`, with its checkpoints) and, 0.5-6 s after its trial process
started, SIGKILLs either the runner (its trial process dies with it) or the trial process (the
runner stores `failed`); right after each kill the trial's checkpoint folder says how many steps
it had reached beyond its newest checkpoint: the steps its resume recomputes. A final rerun
completes the suite; every trial's final metrics and series must equal those of the same suite
run without interruption (another database, other checkpoints).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from benchmarks.reliability import (
    audit,
    database,
    environment,
    lr_methods,
    output_of,
    start,
    wait_for_status,
    write_suite,
)
from harness.core import Status
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from harness.store.models import MetricPoint, Result, Trial

STEPS, EVERY = 1500, 50
"""Steps per trial and between two checkpoints (a checkpoint every 0.2-0.5 s of training here)."""
TRIES = 3
"""Cycles per planned kill at most: one whose trial ended before its kill came is run again."""
TIMING = {"tokens_per_s"}  # a speed, never identical between two runs


def resume_suite(directory: Path, trials: int) -> Path:
    """`trials` trials (learning rates x 2 seeds) of STEPS steps, a checkpoint every EVERY."""
    suite = write_suite(directory, lr_methods(trials // 2), seeds=2, steps=STEPS, name="resume")
    suite.write_text(
        suite.read_text().replace(
            f"eval_every: {STEPS},",
            f"eval_every: {STEPS // 3}, log_every: 1, checkpoint: {{every: {EVERY}}},",
        )
    )
    return suite


def trial_process(runner: int) -> int | None:
    """The runner's trial process: a child of its fork server, itself a child of the runner."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat[stat.rindex(")") + 2 :].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    grandchildren = [g for child in children.get(runner, []) for g in children.get(child, [])]
    return grandchildren[0] if grandchildren else None


def wait_for_trial_process(runner: subprocess.Popen[str], timeout: float = 120) -> None:
    """Until the runner has forked its trial (its fork server's start-up takes seconds)."""
    deadline = time.monotonic() + timeout
    while trial_process(runner.pid) is None and runner.poll() is None:
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)


def lost_steps(folder: Path) -> int | None:
    """Steps a trial reached beyond its newest checkpoint (None: no trace of it yet)."""
    try:
        reached = int((folder / "reached").read_text())
    except (OSError, ValueError):
        return None
    steps = sorted(int(p.stem.removeprefix("step-")) for p in folder.glob("step-*.pt"))
    return reached - (steps[-1] if steps else 0)


def unfinished(url: str, planned: dict[str, Any]) -> list[Any]:
    """The planned trials without a `done` row."""
    engine = create_engine(url)
    try:
        with Session(engine) as session:
            done = set(session.scalars(select(Trial.key).where(Trial.status == Status.DONE)))
    except Exception:  # before the first runner created the schema
        done = set()
    engine.dispose()
    return [trial for key, trial in planned.items() if key not in done]


def numbers(url: str) -> dict[str, tuple[Any, ...]]:
    """Per trial key: status, final metrics (no speeds) and every series point."""
    engine = create_engine(url)
    with Session(engine) as session:
        stored = {
            t.key: (
                t.status,
                sorted(
                    (r.name, r.value)
                    for r in session.scalars(select(Result).where(Result.trial_id == t.id))
                    if r.name not in TIMING
                ),
                sorted(
                    (p.name, p.step, p.value)
                    for p in session.scalars(
                        select(MetricPoint).where(MetricPoint.trial_id == t.id)
                    )
                ),
            )
            for t in session.scalars(select(Trial))
        }
    engine.dispose()
    return stored


def resumes(url: str) -> dict[str, tuple[int, int]]:
    engine = create_engine(url)
    with Session(engine) as session:
        rows = {t.key: (t.resumes, t.recomputed_steps) for t in session.scalars(select(Trial))}
    engine.dispose()
    return rows


def kill_cycle(
    suite: Path, url: str, env: dict[str, str], trial: Any, target: str, rng: random.Random
) -> dict[str, Any]:
    """Rerun one trial and SIGKILL the runner or its trial process at a random moment."""
    only = f"method={trial.method},seed={trial.seed}"
    runner = start(suite, url, env, "--no-mlflow", "--retry-failed", "--only", only)
    landed, lost = False, None
    if wait_for_status(url, Status.RUNNING, runner):
        wait_for_trial_process(runner)
        time.sleep(rng.uniform(0.5, 6.0))
        pid = runner.pid if target == "runner" else trial_process(runner.pid)
        if pid is not None and runner.poll() is None:
            os.kill(pid, signal.SIGKILL)
            landed = True
            time.sleep(0.2)  # the trial process dies with its runner
            lost = lost_steps(Path(env["LAYERBENCH_CHECKPOINTS"]) / trial.key)
    output_of(runner)
    return {"target": target, "landed": landed, "exit": runner.returncode, "lost": lost}


def resume_campaign(kind: str, kills: int, trials: int = 6, seed: int = 0) -> dict[str, Any]:
    """`kills` SIGKILLs (half of the runner, half of the trial process, shuffled), a final
    rerun, the audit, and the comparison with an uninterrupted run."""
    rng = random.Random(seed)
    targets = ["runner", "trial"] * (kills // 2) + ["runner"] * (kills % 2)
    rng.shuffle(targets)
    with tempfile.TemporaryDirectory() as tmp, database(kind, Path(tmp)) as url:
        workdir = Path(tmp)
        suite = resume_suite(workdir, trials)
        planned = {t.key: t for t in plan_suite(load_suite(suite))}
        env = environment(workdir, LAYERBENCH_CHECKPOINTS=str(workdir / "checkpoints"))
        started = time.monotonic()
        cycles: list[dict[str, Any]] = []
        for target in targets:
            for _ in range(TRIES):  # a kill that came after its trial ended is tried again
                left = unfinished(url, planned)
                if not left:
                    break
                cycles.append(kill_cycle(suite, url, env, rng.choice(left), target, rng))
                print(f"cycle {len(cycles)}: {cycles[-1]}", flush=True)
                if cycles[-1]["landed"]:
                    break
        final = start(suite, url, env, "--no-mlflow", "--retry-failed")
        output = output_of(final)
        seconds = round(time.monotonic() - started)
        figures = audit(url, suite)
        whole_url = f"sqlite:///{workdir / 'whole.db'}"
        whole_env = environment(workdir, LAYERBENCH_CHECKPOINTS=str(workdir / "whole-checkpoints"))
        output_of(start(suite, whole_url, whole_env, "--no-mlflow"))
        interrupted, whole = numbers(url), numbers(whole_url)
        recomputed = resumes(url)
    lost = [c["lost"] for c in cycles if c["lost"] is not None]
    return {
        "database": kind,
        "trials": len(planned),
        "steps_per_trial": STEPS,
        "checkpoint_every": EVERY,
        "kills_planned": dict(Counter(targets)),
        "cycles": len(cycles),
        "kills_landed": dict(Counter(c["target"] for c in cycles if c["landed"])),
        "final_rerun_exit": final.returncode,
        "final_rerun_tail": output.strip().splitlines()[-1:] if final.returncode else [],
        "seconds": seconds,
        **figures,
        "identical_to_uninterrupted": sum(interrupted[k] == whole[k] for k in planned),
        "different_from_uninterrupted": sorted(
            k[:12] for k in planned if interrupted.get(k) != whole.get(k)
        ),
        "resumes": sum(r for r, _ in recomputed.values()),
        "recomputed_steps_stored": sum(s for _, s in recomputed.values()),
        "trials_recomputing_over_an_interval_per_resume": sum(
            s > r * EVERY for r, s in recomputed.values()
        ),
        "kills_before_a_first_step": sum(c["landed"] and c["lost"] is None for c in cycles),
        "lost_steps_per_kill": lost,
        "max_lost_steps_per_kill": max(lost, default=0),
    }
