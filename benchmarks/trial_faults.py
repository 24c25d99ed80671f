"""Faults inside trials and around them (docs/reliability.md), run by `reliability.py faults`.

One suite holds a trial per fault: a blow-up to NaN, an exception, a soft timeout, a hang past
`time_limit_s`, an out-of-memory under RLIMIT_AS; MLflow's artifact directory is a full tmpfs
(disk full); then a suite runs on a throwaway PostgreSQL cluster that is stopped mid-suite and
started again. Every fault must end as a stored status with its reason, the runner must carry on,
and nothing may be lost or stored twice.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from benchmarks.reliability import (
    audit,
    environment,
    output_of,
    start,
    wait_for_status,
    write_suite,
)
from harness.core import Status
from harness.store.models import Trial

PG_BIN = Path(shutil.which("pg_ctl") or "/usr/local/bin/pg_ctl").parent
THROWAWAY_PORT = 5499
FAULTS = {
    "ok": "{}",
    "nan": "{optimizer: {lr: 1.0e+6}, train: {grad_clip: null, divergence_factor: 1.0e+30}}",
    "exception": "{optimizer: {name: explode}}",
    "soft-timeout": "{optimizer: {name: sleepy}, time_limit_s: 30, train: {steps: 400}}",
    "hang": "{optimizer: {name: hang}, time_limit_s: 30}",
    "oom": "{}",
}
OOM_MODEL = "{type: gpt, n_layers: 4, d_model: 4096, n_heads: 8, max_seq_len: 32}"


def fault_suite(directory: Path) -> Path:
    path = write_suite(directory, FAULTS, steps=4, name="faults")
    text = path.read_text().replace("models: {g:", f"models: {{huge: {OOM_MODEL}, g:")
    text += (
        "matrix:\n"
        "  - {methods: [ok, nan, exception, soft-timeout, hang], models: [g], tasks: [t]}\n"
        "  - {methods: [oom], models: [huge], tasks: [t]}\n"
    )
    path.write_text(text)
    return path


def outcomes(url: str) -> dict[str, dict[str, Any]]:
    with Session(create_engine(url)) as session:
        return {
            t.method: {
                "status": t.status,
                "reason": (t.error or "").strip().splitlines()[-1][:160] if t.error else "",
                "attempts": t.attempts,
                "mlflow_run": t.mlflow_run_id is not None,
            }
            for t in session.scalars(select(Trial))
        }


def full_tmpfs(path: Path) -> bool:
    """Mount a 64 KiB tmpfs at `path` and fill it; False where mounting is not allowed."""
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(path)])
    if mounted.returncode:
        return False
    subprocess.run(["dd", "if=/dev/zero", f"of={path / 'filler'}", "bs=4k"], capture_output=True)
    return True


def in_trial_faults(workdir: Path) -> dict[str, Any]:
    suite = fault_suite(workdir)
    url = f"sqlite:///{workdir / 'faults.db'}"
    artifacts = workdir / "mlruns"  # MLflow's default artifact root, in the runner's folder
    disk_full = full_tmpfs(artifacts)
    env = environment(workdir, LB_RLIMIT_AS_EXTRA=str(1 << 30))  # 1 GiB more per trial
    started = time.monotonic()
    run = start(suite, url, env)
    output = output_of(run)
    first = {"exit_code": run.returncode, "seconds": round(time.monotonic() - started)}
    first["mlflow_warnings"] = output.count("to MLflow failed")
    first["traceback_in_output"] = "Traceback" in output
    statuses = outcomes(url)
    if disk_full:
        subprocess.run(["umount", str(artifacts)], check=True)
    rerun = start(suite, url, env)
    output_of(rerun)
    return {
        "disk_full_tmpfs": disk_full,
        "first_run": first,
        "trials": statuses,
        "after_rerun_with_space": {
            "exit_code": rerun.returncode,
            **audit(url, suite, f"sqlite:///{workdir / 'mlflow.db'}"),
        },
    }


def run_as_postgres(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", "postgres", "--", *command], capture_output=True, text=True, check=True
    )


def database_down_mid_suite(workdir: Path, down_s: float = 20.0) -> dict[str, Any]:
    """Stop a throwaway PostgreSQL cluster after the first result, start it `down_s` later."""
    data = workdir / "pg"
    data.mkdir()
    shutil.chown(data, "postgres")
    shutil.chown(workdir, "postgres")
    run_as_postgres(str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust")
    options = f"-p {THROWAWAY_PORT} -k {data} -c listen_addresses=127.0.0.1"
    pg_ctl = [str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(data / "log"), "-o", options]
    run_as_postgres(*pg_ctl, "-w", "start")
    url = f"postgresql+psycopg://postgres@127.0.0.1:{THROWAWAY_PORT}/postgres"
    try:
        methods = {f"m{i}": "{optimizer: {name: sleepy}}" for i in range(4)}
        suite = write_suite(workdir, methods, steps=6, name="dbdown")
        runner = start(suite, url, environment(workdir), "--no-mlflow")
        wait_for_status(url, Status.DONE)
        run_as_postgres(*pg_ctl, "-m", "fast", "-w", "stop")
        time.sleep(down_s)
        run_as_postgres(*pg_ctl, "-w", "start")
        output = output_of(runner)
        return {
            "down_s": down_s,
            "exit_code": runner.returncode,
            "retry_warnings": output.count("database unreachable"),
            **audit(url, suite),
        }
    finally:
        stop = ["runuser", "-u", "postgres", "--", *pg_ctl, "-m", "immediate", "stop"]
        subprocess.run(stop, capture_output=True)


def fault_campaign() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        inside, down = Path(tmp) / "inside", Path(tmp) / "down"
        inside.mkdir()
        down.mkdir()
        return {"in_trial": in_trial_faults(inside), "database_down": database_down_mid_suite(down)}
