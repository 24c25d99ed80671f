"""The Slurm backend on a real one-node Slurm this module starts (munge, slurmctld, slurmd on
127.0.0.1): same numbers as the local backend, a cancelled job is `failed` with Slurm's reason
and a rerun completes it, a job past its Slurm time limit with its trial's time spent is
`timeout`, a trial longer than its jobs' time limit completes over several jobs with the numbers
of an uninterrupted run, a requeued job resumes its trial, and a Slurm and a local driver on one
PostgreSQL database never run a trial twice.

Skipped where Debian's slurm-wlm and munge are not installed or not run as root (the Makefile's
`slurm` target installs them)."""

from __future__ import annotations

import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import pytest

from harness.runner.slurm_backend import slurm_time
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from harness.store.models import MetricPoint
from tests.factories import ROOT, count, invoke, run_beside, trials_by_key
from tests.test_checkpoint import stored
from tests.test_ray import final_metrics, nightly_beside, wait_gone

pytest.importorskip("submitit")
pytestmark = pytest.mark.slow

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch")

SUITE = """\
suite: {name}
seeds: {seeds}
defaults:
  time_limit_s: {limit}
  train: {{steps: 10, batch_size: 4, warmup_steps: 1, eval_every: 5, eval_batches: 1}}
  optimizer: {{name: adamw, lr: 3.0e-3}}
models:
  gpt-1l: {{type: gpt, n_layers: 1, d_model: 16, n_heads: 2, max_seq_len: 32}}
tasks:
  bytes: {{type: lm, corpus: shakespeare, tokenizer: byte, seq_len: 16}}
methods:
{methods}
slurm: {{folder: {folder}, time_grace_s: 0{slurm}}}
plugins: [tests.plugins.pidfile, tests.plugins.slowstep]
"""

CONF = """\
ClusterName=layerbench-test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={dir}/munge.sock,cred_expire=30
CredType=cred/munge
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
SlurmdParameters=config_overrides
DefMemPerCPU={memory_per_cpu_mb}
MinJobAge=600
KillWait=5
InactiveLimit=0
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=node0 NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName=test Nodes=node0 Default=YES MaxTime=INFINITE State=UP
"""


# `cred_expire` (default 120 s) is also how long a requeued job waits before it starts again
# (slurm.conf(5)): the requeue tests waited out those two minutes.

# Job slots on the node: the held trials (the overdue one, the one the cancel test waits in, the
# one split over several jobs) mostly sleep, so the node offers more slots than the machine has
# cores (`config_overrides` keeps slurmd from draining it for that), and a test's two trials run
# beside the held ones, not after them.
SLOTS = max(6, os.cpu_count() or 1)


class Cluster(NamedTuple):
    conf: Path
    pids: Path


class Overdue(NamedTuple):
    driver: subprocess.Popen[str]
    db: str
    log: Path


class Split(NamedTuple):
    driver: subprocess.Popen[str]
    db: str
    log: Path
    suite: Path
    jobs: Path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def memory_mb() -> int:
    total_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal:")
    )
    return total_kb // 1024 // 2


def start_daemons(directory: Path) -> Path:
    """munged with its own key and socket, then slurmctld and slurmd on a config of their own."""
    for sub in ("state", "spool"):
        (directory / sub).mkdir()
    key = directory / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    subprocess.run(
        [
            "munged",
            "--force",
            f"--socket={directory}/munge.sock",
            f"--key-file={key}",
            f"--log-file={directory}/munged.log",
            f"--seed-file={directory}/munge.seed",
            f"--pid-file={directory}/munge.pid",
        ],
        check=True,
    )
    conf = directory / "slurm.conf"
    conf.write_text(
        CONF.format(
            dir=directory,
            ctld_port=free_port(),
            d_port=free_port(),
            cpus=SLOTS,
            memory_mb=memory_mb(),
            # without a default, a job that asks for no memory is given the node's whole memory
            # and every other job waits for it (the overdue trial held the node for 90 s)
            memory_per_cpu_mb=memory_mb() // SLOTS,
        )
    )
    subprocess.run(["slurmctld", "-f", str(conf), "-i"], check=True)
    subprocess.run(["slurmd", "-f", str(conf), "-N", "node0"], check=True)
    return conf


def stop_daemons(directory: Path) -> None:
    """Cancel what still runs (a test that failed midway), then stop the daemons."""
    conf = {**os.environ, "SLURM_CONF": str(directory / "slurm.conf")}
    subprocess.run(["scancel", "--full", "--user=root"], env=conf, check=False, timeout=30)
    wait_no_jobs(conf)  # the jobs' processes end (KillWait 5 s) before slurmd does
    for pidfile in ("slurmd.pid", "slurmctld.pid", "munge.pid"):
        path = directory / pidfile
        if path.exists():
            subprocess.run(["kill", path.read_text().strip()], check=False)


def wait_no_jobs(env: dict[str, str], timeout_s: float = 10) -> None:
    """Until squeue shows no job running or ending (or `timeout_s`: the daemons stop anyway)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        shown = subprocess.run(
            ["squeue", "--noheader", "--states=RUNNING,COMPLETING,PENDING", "--format=%i"],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if shown.returncode == 0 and not shown.stdout.strip():
            return
        time.sleep(0.2)


def wait_idle(conf: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        shown = subprocess.run(
            ["sinfo", "--noheader", "--format=%t"],
            capture_output=True,
            text=True,
            env={**os.environ, "SLURM_CONF": str(conf)},
            check=False,
        )
        if shown.stdout.strip() == "idle":
            return
        time.sleep(0.5)
    raise AssertionError(
        f"the Slurm node did not come up: {(conf.parent / 'slurmd.log').read_text()}"
    )


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A one-node Slurm, up until the session ends: the overdue trial's wait for Slurm's time
    limit elapses while the other modules run (its test is marked `finish_last`)."""
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing or os.geteuid() != 0:
        pytest.skip(
            f"a local Slurm needs root and Debian's slurm-wlm and munge (missing: {missing}); "
            "`make slurm` installs them"
        )
    directory = tmp_path_factory.mktemp("slurm")
    pids = tmp_path_factory.mktemp("pids")
    try:
        conf = start_daemons(directory)
        wait_idle(conf)
        yield Cluster(conf, pids)
    finally:
        stop_daemons(directory)


def cluster_environment(cluster: Cluster, pids: Path) -> dict[str, str]:
    """What a driver needs to submit to the cluster: jobs see this tree and `pids`, the
    pidfile plugin's folder."""
    return {
        "SLURM_CONF": str(cluster.conf),
        "HF_HUB_OFFLINE": "1",
        "LAYERBENCH_TEST_PIDS": str(pids),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }


@pytest.fixture(scope="module")
def slurm(slurm_cluster: Cluster) -> Iterator[Cluster]:
    """The cluster, with its environment set for this module's tests."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in cluster_environment(slurm_cluster, slurm_cluster.pids).items():
            patch.setenv(name, value)
        yield slurm_cluster


def suite_file(
    directory: Path,
    methods: str,
    seeds: str = "[0, 1]",
    name: str = "tiny",
    limit: float = 300,
    job_time_s: float | None = None,
) -> Path:
    """A suite of tiny trials. submitit asks Slurm for SIGUSR2 90 s before a job's limit, which
    ends a job still unpickling its trial (importing torch): the limit leaves a loaded machine
    minutes for that (a one-minute job is warned 30 s before its end)."""
    body = "\n".join(f"  {line}" for line in methods.strip().splitlines())
    path = directory / f"{name}.yaml"
    folder = directory / "jobs"
    slurm = f", job_time_s: {job_time_s}" if job_time_s else ""
    path.write_text(
        SUITE.format(name=name, seeds=seeds, methods=body, folder=folder, limit=limit, slurm=slurm)
    )
    return path


def driver(args: list[str], log: Path, **env: str) -> subprocess.Popen[str]:
    """`layerbench ARGS` in the background, its output in a file nobody has to read meanwhile."""
    with log.open("w") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "harness", *args],
            stdout=sink,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **env},
        )


TIMEOUT_TEST = "test_a_trial_past_its_slurm_time_limit_is_a_timeout"


@pytest.fixture(scope="session")
def overdue(
    slurm_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Overdue | None]:
    """A trial held past its one-minute Slurm limit: started with the module's first test, as
    Slurm checks limits only every 30 s or so and this takes about 90 s of waiting; its test
    runs last in the session (`finish_last`), by when the wait is over. None, and nothing
    started, where that test does not run (skipped or deselected)."""
    if not any(
        item.name == TIMEOUT_TEST and item.get_closest_marker("skip") is None
        for item in request.session.items
    ):
        yield None
        return
    directory = tmp_path_factory.mktemp("overdue")
    pids = directory / "pids"
    pids.mkdir()
    (pids / "hold").touch()  # the trial waits in the pidfile plugin until Slurm kills it
    suite = suite_file(
        directory, "held: {optimizer: {name: adamw-pidfile}}", seeds="[0]", name="overdue", limit=1
    )
    db = f"sqlite:///{directory / 'overdue.db'}"
    log = directory / "driver.log"
    args = ["run", str(suite), "--db", db, "--no-mlflow", "--backend", "slurm"]
    process = driver(args, log, **cluster_environment(slurm_cluster, pids))
    yield Overdue(process, db, log)
    if process.poll() is None:
        process.kill()


SPLIT_STEPS = 70
SPLIT_STEP_S = 1.5
"""The split trial's steps and the sleep after each: 105 s of training, on two-minute jobs,
each warned 30 s before its end (up to a minute earlier: 30-90 s after it started)."""
SPLIT_EVERY = 2
"""Steps between its checkpoints (3 s)."""


@pytest.fixture(scope="session")
def split(slurm_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Split]:
    """A trial of about 105 s of training on two-minute Slurm jobs (`slurm.job_time_s: 120`,
    the shortest), checkpointing every 3 s: started with the module's first test, checked last
    (`finish_last`), as it spans two or more jobs and their requeues."""
    directory = tmp_path_factory.mktemp("split")
    every = SPLIT_EVERY
    train = f"{{steps: {SPLIT_STEPS}, eval_every: 20, log_every: {every}, "
    train += f"checkpoint: {{every: {every}}}}}"
    suite = suite_file(
        directory,
        f"slow: {{optimizer: {{name: adamw-slow}}, train: {train}}}",
        seeds="[0]",
        name="split",
        limit=600,
        job_time_s=120,
    )
    db = f"sqlite:///{directory / 'split.db'}"
    log = directory / "driver.log"
    env = cluster_environment(slurm_cluster, slurm_cluster.pids)
    env |= {
        "LAYERBENCH_CHECKPOINTS": str(directory / "checkpoints"),
        "LAYERBENCH_TEST_STEP_S": str(SPLIT_STEP_S),
    }
    args = ["run", str(suite), "--db", db, "--no-mlflow", "--backend", "slurm"]
    process = driver(args, log, **env)
    yield Split(process, db, log, suite, directory / "jobs")
    if process.poll() is None:
        process.kill()


@pytest.mark.usefixtures("overdue", "split")
def test_slurm_and_local_store_identical_metrics(slurm: Cluster, tmp_path: Path) -> None:
    suite = suite_file(tmp_path, "post-ln: {norm: {placement: post}}")
    on_slurm, local = f"sqlite:///{tmp_path / 'slurm.db'}", f"sqlite:///{tmp_path / 'local.db'}"
    # one thread per trial on both backends: the suite sets no `resources.cpus`
    slurm_ran, local_ran = run_beside(
        ["run", str(suite), "--db", on_slurm, "--backend", "slurm"],
        ["run", str(suite), "--db", local, "--no-mlflow", "--workers", "2"],
    )
    assert slurm_ran.returncode == 0, slurm_ran.stdout + slurm_ran.stderr
    assert local_ran.exit_code == 0, local_ran.output
    assert len(final_metrics(on_slurm)) == 2
    assert final_metrics(on_slurm) == final_metrics(local)
    stored = trials_by_key(on_slurm).values()
    assert all(t.status == "done" and t.attempts == 1 for t in stored)
    assert all(t.mlflow_run_id for t in stored)  # the driver logged each to MLflow
    assert all(t.environment["threads"] == 1 for t in stored)
    again = invoke("run", str(suite), "--db", on_slurm, "--backend", "slurm")
    assert again.exit_code == 0 and "2 stored, 0 to run" in again.stdout  # nothing missing


def test_a_nightly_run_on_slurm_stores_what_the_local_backend_stores(
    slurm: Cluster, tmp_path: Path
) -> None:
    suite = suite_file(tmp_path, "post-ln: {norm: {placement: post}}")
    folder = tmp_path / "nightly-jobs"  # the command line's folder, over the suite's
    options = ["--slurm-folder", str(folder), "--slurm-array-parallelism", "2"]
    nightly_beside(suite, ["--backend", "slurm", *options])
    assert list(folder.iterdir())  # the jobs' files went where the flag said


def job_of(pid: int) -> str:
    """The Slurm job a process belongs to (`scontrol pidinfo`: "Slurm JobId=7 ends at ...")."""
    shown = subprocess.run(
        ["scontrol", "pidinfo", str(pid)], capture_output=True, text=True, check=True
    )
    found = re.search(r"JobId=(\d+)", shown.stdout)
    assert found, shown.stdout
    return found.group(1)


def wait_for_pid(pids: Path, driver: subprocess.Popen[str], log: Path) -> int:
    deadline = time.monotonic() + 300  # a loaded machine's job takes minutes to import torch
    while time.monotonic() < deadline:
        found = [p.name for p in pids.iterdir() if p.name.isdigit()]
        if found:
            return int(found[0])
        if driver.poll() is not None:
            raise AssertionError(f"the driver ended ({driver.returncode}): {log.read_text()}")
        time.sleep(0.1)
    raise AssertionError(f"no trial started in time: {log.read_text()}")


def test_a_cancelled_job_is_failed_with_the_reason_and_a_rerun_completes_it(
    slurm: Cluster, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    hold = pids / "hold"  # the watched trial waits after writing its pid: the scancel lands in it
    hold.touch()
    suite = suite_file(
        tmp_path, "pre-ln: {}\nwatched: {optimizer: {name: adamw-pidfile}}", seeds="[0]"
    )
    db = f"sqlite:///{tmp_path / 'cancel.db'}"
    run = ["run", str(suite), "--db", db, "--no-mlflow", "--backend", "slurm"]
    log = tmp_path / "driver.log"
    process = driver(run, log, LAYERBENCH_TEST_PIDS=str(pids))
    job = job_of(wait_for_pid(pids, process, log))
    subprocess.run(["scancel", job], check=True)
    assert process.wait(timeout=300) == 1, log.read_text()
    hold.unlink()  # only now: the trial must not finish in the grace between SIGTERM and SIGKILL
    stored = {t.method: t for t in trials_by_key(db).values()}
    assert stored["pre-ln"].status == "done"
    watched = stored["watched"]
    assert watched.status == "failed" and watched.attempts == 1
    assert "ended CANCELLED (see `scancel`) without a result" in watched.error, watched.error

    rerun = invoke(*run, "--retry-failed")  # in this process: its job sees the same environment
    assert rerun.exit_code == 0, rerun.output
    after = trials_by_key(db)
    assert set(after) == {t.key for t in plan_suite(load_suite(suite))}
    assert all(t.status == "done" for t in after.values())
    again = {t.method: t for t in after.values()}
    assert again["watched"].attempts == 2 and again["pre-ln"].attempts == 1
    assert again["pre-ln"].ended_at == stored["pre-ln"].ended_at  # not run again
    for trial in after.values():  # two evaluations, four series each, nothing twice
        assert count(db, MetricPoint, trial.id) == 2 * 4


def test_a_slurm_and_a_local_driver_on_postgresql_never_run_a_trial_twice(
    slurm: Cluster, postgres_url: str, tmp_path: Path
) -> None:
    suite = suite_file(tmp_path, "pre-ln: {}\nrms: {norm: {type: rmsnorm}}")
    assert invoke("db", "upgrade", "--db", postgres_url).exit_code == 0  # before the drivers race
    run = [sys.executable, "-m", "harness", "run", str(suite), "--db", postgres_url, "--no-mlflow"]
    commands = [[*run, "--backend", "slurm"], run]
    drivers = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True) for c in commands]
    outputs = [process.communicate(timeout=300)[0] for process in drivers]
    assert [process.returncode for process in drivers] == [0, 0], outputs
    stored = trials_by_key(postgres_url)
    assert len(stored) == 4
    assert all(t.status == "done" and t.attempts == 1 for t in stored.values())
    assert sum(output.count("    done ") for output in outputs) == 4, outputs


@pytest.mark.finish_last
def test_a_trial_past_its_slurm_time_limit_is_a_timeout(overdue: Overdue | None) -> None:
    """Its time_limit_s (1 s) is spent when its job is warned: not requeued."""
    assert overdue is not None
    assert overdue.driver.wait(timeout=300) == 1, overdue.log.read_text()
    (trial,) = trials_by_key(overdue.db).values()
    assert trial.status == "timeout"
    assert "ran past its Slurm time limit" in trial.error, trial.error
    assert "time_limit_s (1 s, over all its jobs) was spent" in trial.error, trial.error
    assert trial.attempts == 1


def restarts(job: str) -> int:
    """How many times Slurm requeued a job (`scontrol show job`'s Restarts=N)."""
    shown = subprocess.run(
        ["scontrol", "show", "job", job], capture_output=True, text=True, check=True
    )
    found = re.search(r"Restarts=(\d+)", shown.stdout)
    assert found, shown.stdout
    return int(found.group(1))


@pytest.mark.finish_last
def test_a_trial_longer_than_its_slurm_jobs_completes_over_several_with_identical_metrics(
    split: Split, slurm: Cluster, tmp_path: Path
) -> None:
    assert split.driver.wait(timeout=600) == 0, split.log.read_text()
    (trial,) = trials_by_key(split.db).values()
    assert trial.status == "done" and trial.attempts == 1, trial.error
    (job,) = [folder.name for folder in split.jobs.iterdir() if folder.name.isdigit()]
    assert restarts(job) >= 1  # two jobs or more
    assert trial.resumes >= 1  # each from its checkpoint, recomputing at most one interval
    assert trial.recomputed_steps <= SPLIT_EVERY * trial.resumes
    assert count(split.db, MetricPoint, trial.id) == 4 * 4  # four evaluations, nothing twice
    local = f"sqlite:///{tmp_path / 'local.db'}"
    with pytest.MonkeyPatch.context() as patch:  # no sleep: the same numbers, in seconds
        patch.setenv("LAYERBENCH_CHECKPOINTS", str(tmp_path / "checkpoints"))
        patch.delenv("LAYERBENCH_TEST_STEP_S", raising=False)
        ran = invoke("run", str(split.suite), "--db", local, "--no-mlflow")
    assert ran.exit_code == 0, ran.output
    resumed, whole = stored(split.db)[trial.key], stored(local)[trial.key]
    assert resumed[3:] == whole[3:]  # final metrics and every series point, to the last digit
    assert whole[1:3] == (0, 0)


def test_job_resources_and_time_limit_follow_the_suite() -> None:
    from harness.runner.slurm_backend import job_resources, slurm_time
    from harness.spec.schema import ResourcesSpec

    assert job_resources("cpu", ResourcesSpec()) == {"cpus_per_task": 1}
    assert job_resources("cuda:0", ResourcesSpec()) == {"cpus_per_task": 1, "gpus_per_node": 1}
    wanted = ResourcesSpec(cpus=7.5, gpus=0.5, memory_gb=1.5)
    assert job_resources("cuda", wanted) == {
        "cpus_per_task": 8,
        "gpus_per_node": 1,
        "mem": "1536M",
    }
    two_ranks = ResourcesSpec(nodes=1, tasks=2)
    assert job_resources("cpu", two_ranks) == {
        "cpus_per_task": 1,
        "nodes": 1,
        "ntasks_per_node": 2,
    }
    four_gpus = job_resources("cuda", ResourcesSpec(gpus=4, nodes=2))
    assert four_gpus == {"cpus_per_task": 1, "gpus_per_node": 4, "nodes": 2, "ntasks_per_node": 4}
    assert slurm_time(1) == "0:01:00"
    assert slurm_time(900 + 60) == "0:16:00"
    assert slurm_time(2 * 3600 + 1) == "2:01:00"


def test_a_trial_longer_than_its_jobs_is_warned_and_requeued_within_its_time_limit(
    tiny_suite: Path,
) -> None:
    from harness.runner.slurm_backend import executor_parameters
    from harness.runner.slurm_job import SlurmTrial
    from harness.spec.schema import ResourcesSpec, SlurmSpec

    (trial, *_) = plan_suite(load_suite(tiny_suite))
    one_job = executor_parameters(trial, ResourcesSpec(), SlurmSpec(time_grace_s=600))
    seconds = 60 * math.ceil((trial.recipe.time_limit_s + 600) / 60)
    assert one_job["additional_parameters"]["time"] == slurm_time(seconds)
    assert one_job["signal_delay_s"] == 90
    split = executor_parameters(trial, ResourcesSpec(), SlurmSpec(job_time_s=120))
    assert (split["additional_parameters"]["time"], split["signal_delay_s"]) == ("0:02:00", 30)
    tiny = replace(trial, recipe=replace(trial.recipe, time_limit_s=1))
    shortest = executor_parameters(tiny, ResourcesSpec(), SlurmSpec(time_grace_s=0))
    assert shortest["additional_parameters"]["time"] == "0:02:00"  # a minute could be warned

    requeued: list[int] = []

    def requeue(signum: int, frame: object) -> None:
        requeued.append(signum)

    job = SlurmTrial("k" * 64, budget_s=600, job_s=120, warning_s=30, spent_s=400)
    job.started = time.monotonic() - 20  # Slurm warns a requeued job as it starts: ignored
    job.on_warning(requeue, 12, None)
    assert requeued == [] and not job.warned
    job.started = time.monotonic() - 60  # this job has run a minute: 460 s of 600 spent
    job.on_warning(requeue, 12, None)
    assert requeued == [12]  # 460 + 30 < 600: the budget outlasts this job
    job.on_warning(requeue, 14, None)  # the job's own timer after Slurm's warning: once
    assert requeued == [12]
    job.warned, job.spent_s = False, 520  # 580 + 30 >= 600: the trial ends with this job
    job.on_warning(requeue, 14, None)
    assert requeued == [12] and job.warned
    assert 580 <= job.spent() < 590


def test_command_line_slurm_options_override_the_suite_and_a_bad_flag_is_invalid_input(
    tiny_suite: Path,
) -> None:
    from harness.runner.slurm_backend import slurm_settings
    from harness.spec.schema import SlurmSpec

    suite = SlurmSpec(partition="cpu", qos="low", sbatch={"constraint": "a100"})
    flags = {"partition": "gpu", "account": None, "qos": None, "array_parallelism": 4}
    merged = slurm_settings(suite, flags, ["exclude=node7", "--mail-type=FAIL"])
    assert (merged.partition, merged.qos, merged.array_parallelism) == ("gpu", "low", 4)
    assert merged.sbatch == {"constraint": "a100", "exclude": "node7", "mail-type": "FAIL"}
    ran = invoke("run", str(tiny_suite), "--backend", "slurm", "--sbatch", "x")
    assert ran.exit_code == 2
    assert "--sbatch takes KEY=VALUE" in ran.output


def test_a_requeued_job_resumes_its_trial_from_its_checkpoint(
    slurm: Cluster, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    hold = pids / "hold"  # the trial waits at its fifth step, after its checkpoints of steps 2, 4
    hold.touch()
    train = "{steps: 12, eval_every: 6, log_every: 2, checkpoint: {every: 2}}"
    method = f"pre-ln: {{optimizer: {{name: adamw-held-step}}, train: {train}}}"
    suite = suite_file(tmp_path, method, seeds="[0]")
    checkpoints = tmp_path / "checkpoints"
    db = f"sqlite:///{tmp_path / 'requeue.db'}"
    log = tmp_path / "driver.log"
    run = ["run", str(suite), "--db", db, "--no-mlflow", "--backend", "slurm"]
    process = driver(
        run, log, LAYERBENCH_CHECKPOINTS=str(checkpoints), LAYERBENCH_TEST_PIDS=str(pids)
    )
    held = wait_for_pid(pids, process, log)
    assert list(checkpoints.glob("*/step-00000004.pt")), log.read_text()
    subprocess.run(["scontrol", "requeue", job_of(held)], check=True)
    # submitit's job outlives Slurm's SIGTERM until the SIGKILL: held till then, it cannot
    # finish the trial first
    assert wait_gone(held, timeout_s=60), "the requeued job's trial did not end"
    hold.unlink()  # the requeued job's trial goes on from its checkpoint without waiting
    assert process.wait(timeout=600) == 0, log.read_text()
    (trial,) = trials_by_key(db).values()
    assert trial.status == "done" and trial.resumes >= 1, log.read_text()
    local = f"sqlite:///{tmp_path / 'local.db'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LAYERBENCH_CHECKPOINTS", str(tmp_path / "local-checkpoints"))
        assert invoke("run", str(suite), "--db", local, "--no-mlflow").exit_code == 0
    assert final_metrics(db) == final_metrics(local)


def test_a_trial_of_two_cpu_ranks_runs_as_one_job_of_two_tasks_and_stores_one_result(
    slurm: Cluster, tmp_path: Path
) -> None:
    suite = suite_file(tmp_path, "pre-ln: {}", seeds="[0]")
    suite.write_text(suite.read_text() + "resources: {nodes: 1, tasks: 2}\n")
    db = f"sqlite:///{tmp_path / 'ranks.db'}"
    ran = invoke("run", str(suite), "--db", db, "--no-mlflow", "--backend", "slurm")
    assert ran.exit_code == 0, ran.output
    (trial,) = trials_by_key(db).values()
    assert trial.status == "done" and trial.environment["ranks"] == 2, trial.error
    (job,) = [p for p in (tmp_path / "jobs").iterdir() if p.is_dir()]  # one job, two ranks
    assert sorted(p.name for p in job.glob("*_result.pkl")) == [
        f"{job.name}_0_result.pkl",
        f"{job.name}_1_result.pkl",
    ]
