"""docker/ without a Docker daemon: hadolint on the Dockerfile, the compose files against the
Compose Specification, and each service's command run natively with its environment (local
PostgreSQL, the MLflow server, the leaderboard, the Ray head, the scheduler).

tests/data/compose-spec.json is schema/compose-spec.json of github.com/compose-spec/compose-spec
at commit 170098ba07d9f53c383a41bfd4c5166b0a4529a6 (2026-06-23, Apache-2.0), vendored so the test
runs offline.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from tests.factories import PG_ADMIN_URL, ROOT, trials_by_key, write_suite

DOCKER = ROOT / "docker"
SCHEMA = ROOT / "tests" / "data" / "compose-spec.json"
VARIABLE = re.compile(r"\$\$|\$\{(\w+)(?:(:?[-?])([^}]*))?\}|\$(\w+)")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's variable substitution: ${VAR}, ${VAR:-default}, ${VAR:?error}, $$ for $."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        found = env.get(name)
        operator, argument = match.group(2), match.group(3)
        if operator in (":-", "-") and not found:
            return argument
        if operator in (":?", "?") and not found:
            raise AssertionError(f"compose would stop: {name}: {argument}")
        return found or ""

    return VARIABLE.sub(substitute, value)


def env_example() -> dict[str, str]:
    lines = (DOCKER / ".env.example").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def compose(name: str = "compose.yaml") -> dict[str, Any]:
    return yaml.safe_load((DOCKER / name).read_text())


def test_dockerfile_is_hadolint_clean() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    linted = subprocess.run(
        [hadolint, str(DOCKER / "Dockerfile")], capture_output=True, text=True, timeout=60
    )
    assert linted.returncode == 0 and not linted.stdout.strip(), linted.stdout + linted.stderr


@pytest.mark.parametrize("name", ["compose.yaml", "compose.gpu.yaml", "compose.host.yaml"])
def test_compose_files_follow_the_compose_specification(name: str) -> None:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    for document in (compose(name), interpolate(compose(name), env_example())):
        problems = [
            f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document)
        ]
        assert not problems, problems


def test_compose_services_as_the_deployment_needs_them() -> None:
    services = compose()["services"]
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert services["mlflow"]["init"] is True
    assert "mlflow" in services["mlflow"]["environment"]["MLFLOW_SERVER_ALLOWED_HOSTS"].split(",")
    assert "/_stcore/health" in " ".join(services["leaderboard"]["healthcheck"]["test"])
    assert services["leaderboard"]["environment"]["STREAMLIT_SERVER_ADDRESS"] == "0.0.0.0"
    assert services["ray-head"]["profiles"] == services["ray-worker"]["profiles"] == ["ray"]
    gpu = compose("compose.gpu.yaml")["services"]["ray-worker"]["deploy"]
    assert gpu["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    # secrets come from docker/.env, which neither git nor the image build context holds
    assert "docker/.env" in (ROOT / ".gitignore").read_text().splitlines()
    assert "docker/.env" in (ROOT / ".dockerignore").read_text().splitlines()
    assert "PASSWORD" not in (DOCKER / "Dockerfile").read_text()


# --- each service's command, run natively -------------------------------------------------

CONTAINER_ONLY = {  # values that only make sense inside a container, and what replaces them
    "--host=0.0.0.0": "--host=127.0.0.1",
    "STREAMLIT_SERVER_ADDRESS=0.0.0.0": "STREAMLIT_SERVER_ADDRESS=127.0.0.1",
}


def executable(program: str) -> str:
    """The image's `python`, `layerbench`, `mlflow` and `ray` are this environment's."""
    if program == "python":
        return sys.executable
    beside = Path(sys.executable).with_name(program)
    return str(beside) if beside.exists() else program


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Deployment:
    """The compose file interpolated with this test's variables, its services started here."""

    variables: dict[str, str]
    artifacts: Path
    processes: list[subprocess.Popen[str]]

    def service(self, name: str) -> dict[str, Any]:
        return interpolate(compose()["services"][name], self.variables)

    def command(self, name: str) -> list[str]:
        program, *args = self.service(name)["command"]
        command = [executable(program), *(CONTAINER_ONLY.get(arg, arg) for arg in args)]
        volume = "--artifacts-destination=/mlartifacts"
        return [f"--artifacts-destination={self.artifacts}" if a == volume else a for a in command]

    def environment(self, name: str) -> dict[str, str]:
        service_env = {k: str(v) for k, v in self.service(name).get("environment", {}).items()}
        service_env = {
            k: CONTAINER_ONLY.get(f"{k}={v}", f"{k}={v}").split("=", 1)[1]
            for k, v in service_env.items()
        }
        return {**os.environ, **service_env}

    def run(self, name: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(name),
            env=self.environment(name),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, name: str, log: Path) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            self.command(name),
            env=self.environment(name),
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
            text=True,
        )
        self.processes.append(process)
        return process

    def healthy(self, name: str, process: subprocess.Popen[str], timeout_s: float = 120) -> None:
        """Run the service's own healthcheck until it passes."""
        test = self.service(name)["healthcheck"]["test"]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert process.poll() is None, f"{name} exited with {process.returncode}"
            probe = subprocess.run(
                [executable(test[1]), *test[2:]], env=self.environment(name), capture_output=True
            )
            if probe.returncode == 0:
                return
            time.sleep(0.5)
        raise AssertionError(f"{name} did not become healthy")


def postgres_up() -> None:
    try:
        with create_engine(PG_ADMIN_URL).connect():
            pass
    except Exception as error:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"PostgreSQL is not reachable at {PG_ADMIN_URL}: {error}")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """What `docker compose up` does, here: the postgres image's initialisation on the local
    server (an owner role and database, then docker/postgres/init.sh), the migrate service,
    then the mlflow and leaderboard services; stopped and dropped afterwards."""
    postgres_up()
    suffix = uuid.uuid4().hex[:8]
    variables = {
        **env_example(),
        "POSTGRES_USER": f"lb_owner_{suffix}",
        "POSTGRES_DB": f"lb_{suffix}",
        "MLFLOW_DB": f"lb_mlflow_{suffix}",
        "LEADERBOARD_USER": f"lb_reader_{suffix}",
        "POSTGRES_HOST": "127.0.0.1",
        "MLFLOW_HOST": "127.0.0.1",
        "MLFLOW_PORT": str(free_port()),
        "LEADERBOARD_PORT": str(free_port()),
        "RAY_PORT": str(free_port()),
    }
    owner, database = variables["POSTGRES_USER"], variables["POSTGRES_DB"]
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE ROLE "{owner}" LOGIN CREATEDB CREATEROLE'))
        connection.execute(text(f'CREATE DATABASE "{database}" OWNER "{owner}"'))
    logs = tmp_path_factory.mktemp("services")
    deployed = Deployment(variables, logs / "mlartifacts", [])
    try:
        init = subprocess.run(
            ["bash", str(DOCKER / "postgres" / "init.sh")],
            env={**os.environ, **variables, "PGHOST": "127.0.0.1"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert init.returncode == 0, init.stderr
        ready = deployed.service("postgres")["healthcheck"]["test"]
        pg_env = {
            **os.environ,
            **deployed.service("postgres")["environment"],
            "PGHOST": "127.0.0.1",
        }
        assert subprocess.run(["sh", "-c", ready[1]], env=pg_env, timeout=30).returncode == 0
        migrated = deployed.run("migrate")
        assert migrated.returncode == 0, migrated.stderr
        mlflow = deployed.start("mlflow", logs / "mlflow.log")
        leaderboard = deployed.start("leaderboard", logs / "leaderboard.log")
        deployed.healthy("mlflow", mlflow)
        deployed.healthy("leaderboard", leaderboard)
        yield deployed
    finally:
        for process in deployed.processes:
            stop(process)
        with admin.connect() as connection:
            for name in (database, variables["MLFLOW_DB"]):
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            for role in (variables["LEADERBOARD_USER"], owner):
                connection.execute(text(f'DROP ROLE IF EXISTS "{role}"'))


def stop(process: subprocess.Popen[str], grace_s: float = 30) -> None:
    """End a service and everything it started (it leads its own process group)."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def status_for_host(port: int, host: str) -> int:
    """The MLflow API's answer to a request whose Host header is `host`."""
    url = f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search?max_results=1"
    request = urllib.request.Request(url, headers={"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.slow
def test_mlflow_server_accepts_its_service_name_and_the_leaderboard_only_reads(
    deployment: Deployment,
) -> None:
    port = int(deployment.variables["MLFLOW_PORT"])
    assert status_for_host(port, f"mlflow:{port}") == 200
    assert status_for_host(port, "attacker.example") == 403
    reader = create_engine(deployment.environment("leaderboard")["LAYERBENCH_DB"])
    with reader.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM trials")).scalar() >= 0
        with pytest.raises(DBAPIError, match=r"read-only|permission denied"):
            connection.execute(text("DELETE FROM trials"))
    reader.dispose()


NIGHTLY_SUITE = """\
cadence: nightly
"""


@dataclass
class Scheduled:
    """The scheduler service's one nightly run (`--now`), then its SIGTERM."""

    suite: str
    returncode: int
    log: str
    reports: Path


@pytest.fixture(scope="module")
def scheduled(deployment: Deployment, tmp_path_factory: pytest.TempPathFactory) -> Scheduled:
    """The scheduler service's command, run once right away (`--now`, then it waits for the
    cron time) on a tiny nightly suite and stopped with SIGTERM. Its runner is the compose's:
    the trials it stores and logs to the MLflow server are what the MLflow test checks."""
    directory = tmp_path_factory.mktemp("scheduler")
    suites = directory / "suites"
    suites.mkdir()
    suite = write_suite(suites, "pre-ln: {}", steps=10, eval_every=5, extra=NIGHTLY_SUITE)
    suite.write_text(suite.read_text().replace("suite: tiny", "suite: nightly-tiny"))
    image_only = {  # the image's suites and reports folders, here
        "/opt/layerbench/suites": str(suites),
        "--reports=/reports": f"--reports={directory / 'reports'}",
    }
    command = [image_only.get(arg, arg) for arg in deployment.command("scheduler")]
    log = directory / "scheduler.log"
    scheduler = subprocess.Popen(
        [*command, "--now"],  # once right away, then wait for the cron time
        env=deployment.environment("scheduler"),
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    while "nightly run finished" not in log.read_text():
        assert scheduler.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.5)
    scheduler.send_signal(signal.SIGTERM)
    scheduler.wait(timeout=60)
    return Scheduled("nightly-tiny", scheduler.returncode, log.read_text(), directory / "reports")


@pytest.mark.slow
def test_a_suite_logs_one_mlflow_run_per_trial_to_the_server_and_the_trial_page_links_it(
    deployment: Deployment, scheduled: Scheduled, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.tracking import MlflowClient

    from tests.test_leaderboard import run_app

    runner_env = deployment.environment("scheduler")  # what a runner in the compose sees
    uri, db = runner_env["MLFLOW_TRACKING_URI"], runner_env["LAYERBENCH_DB"]
    stored = {key: t for key, t in trials_by_key(db).items() if t.suite == scheduled.suite}
    assert len(stored) == 2

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(scheduled.suite).experiment_id])
    assert sorted(r.data.tags["trial_key"] for r in runs) == sorted(stored)
    for trial in stored.values():
        assert [m.step for m in client.get_metric_history(trial.mlflow_run_id, "val_loss")] == [
            5,
            10,
        ]
        names = {a.path for a in client.list_artifacts(trial.mlflow_run_id)}
        assert names == {"config.json", "layer_stats.csv"}
    on_disk = {p.name for p in deployment.artifacts.rglob("*") if p.is_file()}
    assert {"config.json", "layer_stats.csv"} <= on_disk  # the server's artifact destination

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("LAYERBENCH_DB", db)
    trial = next(iter(stored.values()))
    at = run_app("trial", key=trial.key)
    assert at.link_button[0].proto.url == f"{uri}/#/runs/{trial.mlflow_run_id}"


@pytest.mark.slow
def test_ray_head_service_takes_a_driver_with_the_token(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ray's files (and the address file that a later `ray.init()` would join) under a short
    # directory of this test's own, not /tmp/ray
    ray_dir = Path(tempfile.mkdtemp(prefix="ray-"))
    monkeypatch.setenv("RAY_TMPDIR", str(ray_dir))
    head = deployment.start("ray-head", deployment.artifacts.parent / "ray-head.log")
    address = f"127.0.0.1:{deployment.variables['RAY_PORT']}"
    probe = "import ray, sys; ray.init(address=sys.argv[1]); print(ray.cluster_resources())"
    env = deployment.environment("ray-worker")
    deadline = time.monotonic() + 120
    while True:
        assert head.poll() is None, "the Ray head exited"
        joined = subprocess.run(
            [sys.executable, "-c", probe, address], env=env, capture_output=True, text=True
        )
        if joined.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert joined.returncode == 0, joined.stderr[-2000:]
    assert "CPU" not in joined.stdout  # the head runs no trial (--num-cpus=0): workers do
    stop(head, grace_s=5)
    shutil.rmtree(ray_dir, ignore_errors=True)


@pytest.mark.slow
def test_scheduler_service_runs_a_nightly_run_and_stops_on_sigterm(
    deployment: Deployment, scheduled: Scheduled
) -> None:
    assert scheduled.returncode == 0, scheduled.log
    assert "nightly run finished with exit code 0" in scheduled.log
    assert "schedule stopped" in scheduled.log
    assert list(scheduled.reports.iterdir())
    stored = trials_by_key(deployment.environment("scheduler")["LAYERBENCH_DB"])
    assert [t.status for t in stored.values() if t.suite == scheduled.suite] == ["done"] * 2
