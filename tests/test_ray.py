"""The Ray backend on a local Ray instance: same numbers as the local backend, a killed trial
process and a killed worker are each retried, then `failed`, and a rerun completes the trial,
a retried task resumes its trial from its checkpoint, and a Ray and a local driver on one
PostgreSQL database never run a trial twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from harness.runner.checkpoint_paths import trial_folder
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from harness.store.models import MetricPoint, Result
from harness.trial_metrics import MEASURED_METRICS
from harness.utils import kept_signal_handlers
from tests.factories import ROOT, count, invoke, run_beside, run_process, trials_by_key
from tests.test_checkpoint import stored

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

SUITE = """\
suite: {name}
seeds: {seeds}
defaults:
  time_limit_s: 120
  train: {{steps: {steps}, batch_size: 4, warmup_steps: 1, eval_every: {eval_every},
    eval_batches: 1}}
  optimizer: {{name: adamw, lr: 3.0e-3}}
models:
  gpt-1l: {{type: gpt, n_layers: 1, d_model: 16, n_heads: 2, max_seq_len: 32}}
tasks:
  bytes: {{type: lm, corpus: shakespeare, tokenizer: byte, seq_len: 16}}
methods:
{methods}
plugins: [tests.plugins.pidfile]
"""


def suite_file(
    directory: Path,
    methods: str,
    seeds: str = "[0, 1]",
    steps: int = 10,
    name: str = "tiny",
    eval_every: int = 5,
) -> Path:
    body = "\n".join(f"  {line}" for line in methods.strip().splitlines())
    path = directory / "suite.yaml"
    text = SUITE.format(name=name, seeds=seeds, steps=steps, methods=body, eval_every=eval_every)
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """One local Ray for the module (2 CPUs, no dashboard, no usage stats, no token auth);
    its workers see this tree and the directory where the pidfile plugin writes."""
    pids = tmp_path_factory.mktemp("pids")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_USAGE_STATS_ENABLED", "0")
        patch.setenv("RAY_AUTH_MODE", "disabled")
        patch.setenv("RAY_worker_niceness", "0")  # as the backend sets it: see WORKER_NICENESS
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("LAYERBENCH_TEST_PIDS", str(pids))
        patch.setenv("LAYERBENCH_CHECKPOINTS", str(tmp_path_factory.mktemp("checkpoints")))
        patch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        # Ray's driver takes SIGTERM: the module's later tests (and their forked children) keep
        # the test process's own handlers
        with kept_signal_handlers(signal.SIGTERM, signal.SIGINT):
            context = ray.init(  # "local": a new instance, even if another runs on this machine
                address="local",
                num_cpus=2,
                include_dashboard=False,
                log_to_driver=False,
                _node_ip_address="127.0.0.1",  # Ray resolves a loopback address to the machine's
            )
            try:
                yield context.address_info["gcs_address"], pids
            finally:
                ray.shutdown()


def final_metrics(url: str) -> dict[tuple[str, int], dict[str, float]]:
    stored = trials_by_key(url)
    with Session(create_engine(url)) as session:
        rows = session.execute(select(Result.trial_id, Result.name, Result.value)).all()
    by_id = {trial.id: (trial.method, trial.seed) for trial in stored.values()}
    metrics: dict[tuple[str, int], dict[str, float]] = {}
    for trial_id, name, value in rows:
        if name not in MEASURED_METRICS:  # a speed or memory, not a result
            metrics.setdefault(by_id[trial_id], {})[name] = value
    return metrics


def test_ray_and_local_store_identical_metrics(
    ray_cluster: tuple[str, Path], tmp_path: Path
) -> None:
    address, _ = ray_cluster
    suite = suite_file(tmp_path, "post-ln: {norm: {placement: post}}")
    on_ray, local = f"sqlite:///{tmp_path / 'ray.db'}", f"sqlite:///{tmp_path / 'local.db'}"
    # one thread per trial on both backends: the suite sets no `resources.cpus`
    ray_ran, local_ran = run_beside(
        ["run", str(suite), "--db", on_ray, "--backend", "ray", "--ray-address=" + address],
        ["run", str(suite), "--db", local, "--no-mlflow", "--workers", "2"],
    )
    assert ray_ran.returncode == 0, ray_ran.stderr
    assert local_ran.exit_code == 0, local_ran.output
    assert len(final_metrics(on_ray)) == 2
    assert final_metrics(on_ray) == final_metrics(local)
    stored = trials_by_key(on_ray).values()
    assert all(t.status == "done" and t.attempts == 1 for t in stored)
    assert all(t.mlflow_run_id for t in stored)  # the driver logged each to MLflow
    assert all(t.environment["threads"] == 1 for t in stored)
    assert all(t.environment["niceness"] == 0 for t in stored)  # not Ray's default 15


def nightly_beside(suite: Path, backend: list[str]) -> str:
    """`layerbench nightly` of the suite's folder (the suite made nightly) on the cluster
    `backend` (its command-line options) in a fresh process while the local backend runs it
    here: both succeed and store the same final metrics; returns the cluster run's database."""
    directory, name = suite.parent, backend[1]
    suite.write_text(suite.read_text() + "cadence: nightly\n")
    on_cluster, local = (f"sqlite:///{directory / db}.db" for db in ("cluster", "local"))
    nightly = ["nightly", str(directory), "--no-mlflow", "--reports"]
    cluster_ran, local_ran = run_beside(
        [*nightly, str(directory / "cluster"), "--db", on_cluster, *backend],
        [*nightly, str(directory / "local"), "--db", local, "--workers", "2"],
    )
    assert cluster_ran.returncode == 0, cluster_ran.stdout + cluster_ran.stderr
    assert local_ran.exit_code == 0, local_ran.output
    assert f"({name} backend)" in cluster_ran.stdout and "(local backend)" in local_ran.output
    assert len(final_metrics(on_cluster)) == 2
    assert final_metrics(on_cluster) == final_metrics(local)
    stored = trials_by_key(on_cluster).values()
    assert all(t.status == "done" and t.suite_run_id is not None for t in stored)
    return on_cluster


def test_a_nightly_run_on_ray_stores_what_the_local_backend_stores(
    ray_cluster: tuple[str, Path], tmp_path: Path
) -> None:
    address, _ = ray_cluster
    suite = suite_file(tmp_path, "post-ln: {norm: {placement: post}}")
    nightly_beside(suite, ["--backend", "ray", "--ray-address", address])


def wait_for_new_pid(
    pids: Path, seen: set[str], driver: subprocess.Popen[str], log: Path, timeout_s: float = 120
) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        new = {p.name for p in pids.iterdir()} - seen
        if new:
            seen |= new
            return int(new.pop())
        if driver.poll() is not None:
            raise AssertionError(f"the driver ended ({driver.returncode}): {log.read_text()}")
        time.sleep(0.05)
    raise AssertionError(f"no trial worker started in time; seen {sorted(seen)}")


def parent_of(pid: int) -> int:
    """A process's parent (/proc/PID/stat's fourth field)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def wait_gone(pid: int, timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not Path(f"/proc/{pid}").exists()


def test_a_killed_trial_and_a_killed_worker_are_retried_then_failed_and_a_rerun_completes_it(
    ray_cluster: tuple[str, Path], tmp_path: Path
) -> None:
    """A worker forks each trial from its fork server (trial -> server -> worker): the first
    attempt's trial process is killed (`TrialProcessDied`, retried), then the retry's worker
    (Ray's own retry, none left), whose trial must not outlive it."""
    address, pids = ray_cluster
    suite = suite_file(
        tmp_path,
        "pre-ln: {}\nwatched: {optimizer: {name: adamw-pidfile}}",
        seeds="[0]",
        name="kill",
    )
    db = f"sqlite:///{tmp_path / 'kill.db'}"
    run = ["run", str(suite), "--db", db, "--no-mlflow", "--backend", "ray"]
    command = [sys.executable, "-m", "harness", *run, "--ray-address", address]
    log = tmp_path / "driver.log"  # a file, not a pipe: nobody reads the driver until it ends
    hold = pids / "hold"  # the watched trial waits after writing its pid: the kill lands in it
    hold.touch()
    seen = {p.name for p in pids.iterdir()}
    with log.open("w") as sink:
        driver = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, text=True)
    os.kill(wait_for_new_pid(pids, seen, driver, log), signal.SIGKILL)  # the trial's process
    retried = wait_for_new_pid(pids, seen, driver, log)
    worker = parent_of(parent_of(retried))  # the Ray worker running it
    title = Path(f"/proc/{worker}/cmdline").read_text()
    assert title.startswith("ray::") or "default_worker" in title, title
    os.kill(worker, signal.SIGKILL)
    assert wait_gone(retried), "the trial outlived its worker"
    hold.unlink()
    assert driver.wait(timeout=300) == 1, log.read_text()
    stored = {t.method: t for t in trials_by_key(db).values()}
    assert stored["pre-ln"].status == "done" and stored["pre-ln"].attempts == 1
    watched = stored["watched"]
    assert watched.status == "failed" and watched.attempts == 2
    assert watched.error.startswith("ray: ") and "died" in watched.error.lower(), watched.error

    rerun = run_process(*run, "--ray-address", address, "--retry-failed")
    assert rerun.returncode == 0, rerun.stderr
    after = trials_by_key(db)
    assert set(after) == {t.key for t in plan_suite(load_suite(suite))}
    assert all(t.status == "done" for t in after.values())
    again = {t.method: t for t in after.values()}
    assert again["watched"].attempts == 3 and again["pre-ln"].attempts == 1
    assert again["pre-ln"].ended_at == stored["pre-ln"].ended_at  # not run again
    for trial in after.values():  # two evaluations, four series each, nothing twice
        assert count(db, MetricPoint, trial.id) == 2 * 4


def test_a_retried_task_resumes_its_trial_from_its_checkpoint(
    ray_cluster: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker running a checkpointing trial is killed mid-trial: Ray's retry forks a trial
    that resumes from the newest checkpoint, to the numbers of an uninterrupted run."""
    address, pids = ray_cluster
    train = "{log_every: 10, checkpoint: {every: 200}}"
    suite = suite_file(
        tmp_path,
        f"watched: {{optimizer: {{name: adamw-pidfile}}, train: {train}}}",
        seeds="[0]",
        steps=4000,
        eval_every=1000,
        name="resume",
    )
    (trial,) = plan_suite(load_suite(suite))
    db = f"sqlite:///{tmp_path / 'resume.db'}"
    run = ["run", str(suite), "--db", db, "--no-mlflow", "--backend", "ray"]
    log = tmp_path / "driver.log"
    seen = {p.name for p in pids.iterdir()}
    with log.open("w") as sink:
        command = [sys.executable, "-m", "harness", *run, "--ray-address", address]
        driver = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, text=True)
    first = wait_for_new_pid(pids, seen, driver, log)
    deadline = time.monotonic() + 120
    while not list(trial_folder(trial.key).glob("step-*.pt")) and time.monotonic() < deadline:
        assert driver.poll() is None, log.read_text()
        time.sleep(0.05)
    os.kill(parent_of(parent_of(first)), signal.SIGKILL)  # its Ray worker
    assert wait_gone(first), "the trial outlived its worker"
    assert driver.wait(timeout=300) == 0, log.read_text()
    stored_trial = trials_by_key(db)[trial.key]
    assert stored_trial.status == "done" and stored_trial.attempts == 2
    assert stored_trial.resumes == 1 and stored_trial.recomputed_steps <= 200
    assert not trial_folder(trial.key).exists()  # removed once its result was stored
    monkeypatch.setenv("LAYERBENCH_CHECKPOINTS", str(tmp_path / "local-checkpoints"))
    whole = f"sqlite:///{tmp_path / 'whole.db'}"
    assert invoke("run", str(suite), "--db", whole, "--no-mlflow").exit_code == 0
    resumed, uninterrupted = stored(db)[trial.key], stored(whole)[trial.key]
    assert resumed[3:] == uninterrupted[3:]  # final metrics and every series point


def test_a_ray_and_a_local_driver_on_postgresql_never_run_a_trial_twice(
    ray_cluster: tuple[str, Path], postgres_url: str, tmp_path: Path
) -> None:
    address, _ = ray_cluster
    suite = suite_file(tmp_path, "pre-ln: {}\nrms: {norm: {type: rmsnorm}}")
    assert invoke("db", "upgrade", "--db", postgres_url).exit_code == 0  # before the drivers race
    run = [sys.executable, "-m", "harness", "run", str(suite), "--db", postgres_url, "--no-mlflow"]
    commands = [[*run, "--backend", "ray", "--ray-address", address], run]
    drivers = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True) for c in commands]
    outputs = [driver.communicate(timeout=300)[0] for driver in drivers]
    assert [driver.returncode for driver in drivers] == [0, 0]
    stored = trials_by_key(postgres_url)
    assert len(stored) == 4
    assert all(t.status == "done" and t.attempts == 1 for t in stored.values())
    assert sum(output.count("    done ") for output in outputs) == 4, outputs


def test_trial_resources_follow_the_device_unless_the_suite_sets_them() -> None:
    from harness.runner.ray_backend import trial_resources
    from harness.spec.schema import ResourcesSpec

    unset = ResourcesSpec()
    assert trial_resources("cpu", unset, cluster_gpus=4) == (1.0, 0.0)
    assert trial_resources("cuda:1", unset, cluster_gpus=4) == (1.0, 1.0)
    assert trial_resources("auto", unset, cluster_gpus=0) == (1.0, 0.0)
    assert trial_resources("auto", unset, cluster_gpus=2) == (1.0, 1.0)
    assert trial_resources("cuda", ResourcesSpec(cpus=8, gpus=0.5), 4) == (8.0, 0.5)
    assert trial_resources("cpu", ResourcesSpec(tasks=2), 0) == (2.0, 0.0)  # one CPU a rank
    assert trial_resources("cuda", ResourcesSpec(cpus=4, tasks=2), 4) == (8.0, 2.0)


def test_a_ray_the_backend_starts_runs_its_trials_at_normal_priority(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from harness.runner.ray_backend import NICENESS_VARIABLE, import_ray

    monkeypatch.setenv(NICENESS_VARIABLE, "15")  # recorded, so undone after the test
    monkeypatch.delenv(NICENESS_VARIABLE)
    import_ray()
    assert os.environ[NICENESS_VARIABLE] == "0"
