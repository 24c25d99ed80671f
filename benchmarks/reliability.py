"""The reliability campaign of docs/reliability.md: kills, concurrent runners, stale claims, faults.

    python benchmarks/reliability.py kill --db sqlite|postgresql --kills 20
    python benchmarks/reliability.py resume --db sqlite|postgresql --kills 20  (checkpoints)
    python benchmarks/reliability.py concurrency --db sqlite|postgresql --runners 4
    python benchmarks/reliability.py stale --db sqlite|postgresql
    python benchmarks/reliability.py faults
    python -m pytest tests/test_fuzz_suites.py --hypothesis-profile=campaign   (fuzzed suites)

Each prints one JSON object of figures. Suites are tiny (a 1-layer GPT, a few steps per trial)
and list the fault-injection plugin `benchmarks.faults`. The tests run a small profile of each.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, func, select, text
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.faults import RUNNER_PID  # noqa: E402
from harness.core import Status  # noqa: E402
from harness.spec import load_suite  # noqa: E402
from harness.spec.plan import plan_suite  # noqa: E402
from harness.store.models import MetricPoint, Result, Trial  # noqa: E402

PG_ADMIN_URL = os.environ.get(
    "LAYERBENCH_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
FINAL = tuple(s for s in Status if s.final)
KILL_KINDS = ("train", "eval", "db_write", "mlflow_write")


def write_suite(
    directory: Path,
    methods: dict[str, str],
    seeds: int = 1,
    steps: int = 3,
    time_limit_s: float = 120,
    name: str = "campaign",
) -> Path:
    """A tiny suite: a 1-layer GPT on bytes of Shakespeare, `steps` steps per trial."""
    body = "\n".join(f"  {json.dumps(method)}: {spec}" for method, spec in methods.items())
    path = directory / f"{name}.yaml"
    path.write_text(
        f"suite: {name}\nseeds: {list(range(seeds))}\nplugins: [benchmarks.faults]\n"
        f"defaults:\n  time_limit_s: {time_limit_s}\n"
        f"  train: {{steps: {steps}, batch_size: 4, eval_every: {steps}, eval_batches: 1, "
        "diagnostics: false}\n"
        "models: {g: {type: gpt, n_layers: 1, d_model: 16, n_heads: 2, max_seq_len: 32}}\n"
        "tasks: {t: {type: lm, corpus: shakespeare, tokenizer: byte, seq_len: 16}}\n"
        f"methods:\n{body}\nbaseline: {next(iter(methods))}\n"
    )
    return path


def lr_methods(n: int) -> dict[str, str]:
    return {f"lr{i}": f"{{optimizer: {{lr: {1e-3 * (i + 1):.1e}}}}}" for i in range(n)}


def environment(workdir: Path, **extra: str) -> dict[str, str]:
    """The runner's environment: this tree first on the path, MLflow in `workdir`, no stray pid."""
    env = {k: v for k, v in os.environ.items() if k != RUNNER_PID}
    env.update(
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        MLFLOW_TRACKING_URI=f"sqlite:///{workdir / 'mlflow.db'}",
        HF_HUB_OFFLINE="1",
        **extra,
    )
    return env


LOGS: dict[int, Path] = {}


def start(suite: Path, url: str, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """`layerbench run` with its output in a log file (a pipe would stay open in the trial
    processes of a killed runner and block the reader)."""
    command = [sys.executable, "-m", "harness", "run", str(suite), "--db", url, *args]
    with tempfile.NamedTemporaryFile("w", suffix=".log", dir=suite.parent, delete=False) as log:
        process = subprocess.Popen(
            command, env=env, cwd=suite.parent, stdout=log, stderr=subprocess.STDOUT, text=True
        )
    LOGS[process.pid] = Path(log.name)
    return process


def output_of(process: subprocess.Popen[str], timeout: float = 1800) -> str:
    """Wait for the runner to end; its output."""
    process.wait(timeout=timeout)
    return LOGS[process.pid].read_text(errors="replace")


@contextmanager
def database(kind: str, workdir: Path) -> Iterator[str]:
    """A fresh SQLite file or PostgreSQL database, dropped afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{workdir / f'{uuid.uuid4().hex[:8]}.db'}"
        return
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"campaign_{uuid.uuid4().hex[:10]}"
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()


def audit(url: str, suite: Path, mlflow_uri: str | None = None) -> dict[str, int]:
    """Lost, duplicated and orphaned results of the suite's planned trials, and attempts."""
    planned = {t.key for t in plan_suite(load_suite(suite))}
    engine = create_engine(url)
    with Session(engine) as session:
        trials = {t.key: t for t in session.scalars(select(Trial).where(Trial.key.in_(planned)))}
        ids = [t.id for t in trials.values()]
        duplicated_results = session.scalar(
            select(func.count()).select_from(
                select(Result.trial_id, Result.name)
                .where(Result.trial_id.in_(ids))
                .group_by(Result.trial_id, Result.name)
                .having(func.count() > 1)
                .subquery()
            )
        )
        duplicated_points = session.scalar(
            select(func.count()).select_from(
                select(MetricPoint.trial_id, MetricPoint.name, MetricPoint.step)
                .where(MetricPoint.trial_id.in_(ids))
                .group_by(MetricPoint.trial_id, MetricPoint.name, MetricPoint.step)
                .having(func.count() > 1)
                .subquery()
            )
        )
        without_results = sum(
            1
            for t in trials.values()
            if t.status == Status.DONE
            and not session.scalar(select(func.count()).where(Result.trial_id == t.id))
        )
    engine.dispose()
    figures = {
        "planned": len(planned),
        "lost": len(planned - {k for k, t in trials.items() if t.status in FINAL})
        + without_results,
        "duplicated": duplicated_results + duplicated_points,
        "orphaned_running": sum(t.status == Status.RUNNING for t in trials.values()),
        "attempts": sum(t.attempts for t in trials.values()),
        "statuses": dict(Counter(t.status for t in trials.values())),
        "reasons": dict(Counter(last_line(t.error) for t in trials.values() if t.error)),
    }
    if mlflow_uri is not None:
        figures |= mlflow_audit(mlflow_uri, load_suite(suite).suite, trials)
    return figures


def last_line(error: str) -> str:
    """A stored error's last line (a traceback's exception), so the campaign keeps why a trial
    failed after its temporary database is gone."""
    return error.strip().splitlines()[-1][:300] if error.strip() else ""


def mlflow_audit(uri: str, suite: str, trials: dict[str, Trial]) -> dict[str, int]:
    """MLflow runs per trial: duplicates (more than one live run) and trials never logged."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(suite)
    runs = client.search_runs([experiment.experiment_id], max_results=10000) if experiment else []
    per_key = Counter(run.data.tags.get("trial_key") for run in runs)
    return {
        "mlflow_duplicated": sum(n - 1 for n in per_key.values() if n > 1),
        "mlflow_missing": sum(
            1 for key, t in trials.items() if t.status in FINAL and not per_key[key]
        ),
    }


def wait_for_status(
    url: str, status: str, runner: subprocess.Popen[str] | None = None, timeout: float = 600
) -> bool:
    """Until a trial has `status` (and, given `runner`, is claimed by that runner process): True;
    False if `runner` ended first (it had nothing left to run)."""
    deadline = time.monotonic() + timeout
    query = select(func.count()).where(Trial.status == status)
    if runner is not None:
        query = query.where(Trial.claimed_by.like(f"%:{runner.pid}:%"))
    engine = create_engine(url, poolclass=NullPool)
    while time.monotonic() < deadline:
        try:
            with Session(engine) as session:
                if session.scalar(query):
                    return True
        except Exception:  # the schema may not exist yet
            pass
        if runner is not None and runner.poll() is not None:
            return False
        time.sleep(0.2)
    raise TimeoutError(f"no trial reached '{status}' in {timeout} s")


KILL_STEPS = 100
"""Steps per trial of the kill campaign: enough that what is left of the suite outlasts a
kill's window (with 3 steps, a runner started in 2.3 s finished the rest of the suite before its
kill landed, 2026-12-04)."""


def kill_campaign(
    kind: str, kills: int, trials: int, seed: int = 0, steps: int = KILL_STEPS
) -> dict[str, Any]:
    """`kills` SIGKILLs of a runner at random moments, each followed by a rerun, then an audit."""
    rng = random.Random(seed)
    schedule = [KILL_KINDS[i % len(KILL_KINDS)] for i in range(kills)]
    rng.shuffle(schedule)
    with tempfile.TemporaryDirectory() as tmp, database(kind, Path(tmp)) as url:
        workdir = Path(tmp)
        suite = write_suite(workdir, lr_methods(trials // 2), seeds=2, steps=steps)
        landed: Counter[str] = Counter()
        started = time.monotonic()
        for cycle, where in enumerate(schedule, 1):
            nth = str(rng.randint(1, 2))
            extra = {} if where == "train" else {"LB_KILL_AT": where, "LB_KILL_NTH": nth}
            # MLflow only where the kill is inside its write (importing it slows every start)
            quiet = () if where == "mlflow_write" else ("--no-mlflow",)
            runner = start(suite, url, environment(workdir, **extra), *quiet)
            if where == "train" and wait_for_status(url, Status.RUNNING, runner):
                time.sleep(rng.uniform(0.2, 2.0))
                runner.send_signal(signal.SIGKILL)
            output_of(runner)
            landed[where] += runner.returncode == -signal.SIGKILL
            elapsed = round(time.monotonic() - started)
            print(f"kill {cycle}: {where} exit {runner.returncode} at {elapsed} s", file=sys.stderr)
        final = start(suite, url, environment(workdir))
        output = output_of(final)
        figures = audit(url, suite, f"sqlite:///{workdir / 'mlflow.db'}")
    return {
        "database": kind,
        "kills_planned": dict(Counter(schedule)),
        "kills_landed": dict(landed),
        "final_rerun_exit": final.returncode,
        "final_rerun_tail": output.strip().splitlines()[-1:] if final.returncode else [],
        "seconds": round(time.monotonic() - started),
        **figures,
    }


def concurrency(kind: str, runners: int, trials: int) -> dict[str, Any]:
    """`runners` runners started at once on one suite: each trial must run exactly once."""
    with tempfile.TemporaryDirectory() as tmp, database(kind, Path(tmp)) as url:
        workdir = Path(tmp)
        suite = write_suite(workdir, lr_methods(trials // 2), seeds=2)
        env = environment(workdir)
        subprocess.run(
            [sys.executable, "-m", "harness", "db", "upgrade", "--db", url],
            env=env,
            check=True,
            capture_output=True,
        )
        started = time.monotonic()
        processes = [start(suite, url, env, "--no-mlflow") for _ in range(runners)]
        outputs = [output_of(p) for p in processes]
        figures = audit(url, suite)
    ran = [output.count("    done ") for output in outputs]
    return {
        "database": kind,
        "runners": runners,
        "exit_codes": [p.returncode for p in processes],
        "trials_run_per_runner": ran,
        "seconds": round(time.monotonic() - started),
        **figures,
        "ran_more_than_once": figures["attempts"] - figures["planned"],
    }


def stale_claims(kind: str) -> dict[str, Any]:
    """A runner killed while holding a claim: its trial is not taken while the runner lives, and
    is taken by the next runner once it is dead (same host); other hosts: after the lease."""
    from harness.store.db import STALE_AFTER

    with tempfile.TemporaryDirectory() as tmp, database(kind, Path(tmp)) as url:
        workdir = Path(tmp)
        methods = {"slow": "{optimizer: {name: sleepy}}", **lr_methods(2)}
        suite = write_suite(workdir, methods, steps=80)
        env = environment(workdir)
        owner = start(suite, url, env, "--no-mlflow")
        wait_for_status(url, Status.RUNNING)
        other = start(suite, url, env, "--no-mlflow")
        output_of(other)
        owner_alive = owner.poll() is None
        with Session(create_engine(url)) as session:
            slow = session.scalars(select(Trial).where(Trial.method == "slow")).one()
            held_by_owner = slow.status == Status.RUNNING and f":{owner.pid}:" in slow.claimed_by
            taken_while_alive = slow.attempts > 1
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        before = time.monotonic()
        rerun = start(suite, url, env, "--no-mlflow")
        output_of(rerun)
        figures = audit(url, suite)
        other_host = remote_lease(url, suite)
    return {
        "database": kind,
        "lease_s": STALE_AFTER.total_seconds(),
        "owner_alive_and_holding_when_second_runner_ended": owner_alive and held_by_owner,
        "taken_while_owner_alive": taken_while_alive,
        "rerun_after_kill_s": round(time.monotonic() - before),
        **figures,
        **other_host,
    }


def remote_lease(url: str, suite: Path) -> dict[str, bool]:
    """A claim by a runner on another host: refused while its heartbeat is fresh, free after."""
    from datetime import timedelta

    from sqlalchemy import update

    from harness.store.db import STALE_AFTER, StoreLedger, now, open_database

    engine = open_database(url)
    trial = plan_suite(load_suite(suite))[0]
    ledger = StoreLedger(engine, suite_run_id=1, force=True)
    verdicts = {}
    for label, age in [("fresh", timedelta(0)), ("expired", STALE_AFTER + timedelta(seconds=1))]:
        with engine.begin() as connection:
            connection.execute(
                update(Trial)
                .where(Trial.key == trial.key)
                .values(
                    status=Status.RUNNING,
                    claimed_by="elsewhere:1:00000000",
                    heartbeat_at=now() - age,
                )
            )
        verdicts[f"other_host_{label}_lease_taken"] = ledger.claim(trial)
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("campaign", choices=["kill", "resume", "concurrency", "stale", "faults"])
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--runners", type=int, default=4)
    parser.add_argument("--trials", type=int, default=40)
    args = parser.parse_args()
    if args.campaign == "kill":
        figures = kill_campaign(args.db, args.kills, args.trials)
    elif args.campaign == "resume":
        from benchmarks.resume_campaign import resume_campaign

        figures = resume_campaign(args.db, args.kills)
    elif args.campaign == "concurrency":
        figures = concurrency(args.db, args.runners, args.trials)
    elif args.campaign == "stale":
        figures = stale_claims(args.db)
    else:
        from benchmarks.trial_faults import fault_campaign

        figures = fault_campaign()
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
