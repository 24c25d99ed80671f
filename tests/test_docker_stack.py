"""The compose stack for real: containers of the built image (migrate, MLflow server, leaderboard,
scheduler) on the host's PostgreSQL (docker/compose.host.yaml). A tiny suite run in a container
stores its trials in PostgreSQL and MLflow; Chromium sees them ranked on the containerized
leaderboard; `down` then `up` keeps every result; the leaderboard's role cannot write.

Runs only under `make docker-test` (it needs the image `docker/build-local.sh` builds: minutes);
skipped with the reason otherwise."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from benchmarks.browser import chromium_path, launch, open_leaderboard
from tests.helpers import PG_ADMIN_URL, ROOT, write_suite
from tests.test_runner import trials_by_key

pytestmark = pytest.mark.slow

PROJECT = "layerbench-stack-test"
IMAGE = "layerbench:cpu"
NAMES = {  # on the host's server; dropped and made again by each run of this module
    "POSTGRES_USER": "lb_stack_owner",
    "POSTGRES_DB": "lb_stack",
    "MLFLOW_DB": "lb_stack_mlflow",
    "LEADERBOARD_USER": "lb_stack_reader",
}
HEALTHY_TIMEOUT_S = 300


def compose_program() -> list[str]:
    """Compose v2 (`docker compose`) where installed, else Debian's docker-compose 1.29."""
    plugin = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    return ["docker", "compose"] if plugin.returncode == 0 else ["docker-compose"]


@dataclass
class Stack:
    env_file: Path
    variables: dict[str, str]
    healthy_s: float

    def compose(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        files = [
            "-f",
            str(ROOT / "docker/compose.yaml"),
            "-f",
            str(ROOT / "docker/compose.host.yaml"),
        ]
        command = [*compose_program(), "-p", PROJECT, "--env-file", str(self.env_file), *files]
        return subprocess.run(
            [*command, *args], capture_output=True, text=True, timeout=timeout, check=False
        )

    def up(self) -> float:
        """`up -d`, then the seconds until mlflow and the leaderboard report healthy."""
        start = time.monotonic()
        started = self.compose("up", "-d")
        assert started.returncode == 0, started.stdout + started.stderr
        while time.monotonic() - start < HEALTHY_TIMEOUT_S:
            if all(self.health(name) == "healthy" for name in ("mlflow", "leaderboard")):
                return time.monotonic() - start
            time.sleep(1)
        logs = self.compose("logs", "--tail=40").stdout
        raise AssertionError(f"the stack did not become healthy:\n{logs}")

    def health(self, service: str) -> str:
        ids = self.compose("ps", "-q", service).stdout.split()
        if not ids:
            return "absent"
        shown = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Health.Status}}", ids[0]],
            capture_output=True,
            text=True,
            check=False,
        )
        return shown.stdout.strip()

    @property
    def db(self) -> str:
        return PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + NAMES["POSTGRES_DB"]

    def url(self, service: str) -> str:
        port = self.variables["MLFLOW_PORT" if service == "mlflow" else "LEADERBOARD_PORT"]
        return f"http://127.0.0.1:{port}"


def reset_databases() -> None:
    """Drop what an earlier run left; make the owner role and database the postgres image would."""
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    owner, database = NAMES["POSTGRES_USER"], NAMES["POSTGRES_DB"]
    with admin.connect() as connection:
        for name in (database, NAMES["MLFLOW_DB"]):
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        for role in (NAMES["LEADERBOARD_USER"], owner):
            connection.execute(text(f'DROP ROLE IF EXISTS "{role}"'))
        connection.execute(text(f'CREATE ROLE "{owner}" LOGIN CREATEDB CREATEROLE'))
        connection.execute(text(f'CREATE DATABASE "{database}" OWNER "{owner}"'))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if os.environ.get("LAYERBENCH_DOCKER_TEST") != "1":
        pytest.skip("builds and starts containers (minutes): `make docker-test` runs it")
    if (
        shutil.which("docker") is None
        or subprocess.run(
            ["docker", "image", "inspect", IMAGE], capture_output=True, check=False
        ).returncode
    ):
        pytest.skip(f"no Docker engine with the image {IMAGE}: run docker/build-local.sh")
    directory = tmp_path_factory.mktemp("stack")
    variables = {
        **NAMES,
        "POSTGRES_PASSWORD": "stack-test",
        "LEADERBOARD_PASSWORD": "stack-test-reader",
        "RAY_AUTH_TOKEN": "stack-test-token",
        "POSTGRES_HOST": "127.0.0.1",
        "MLFLOW_HOST": "127.0.0.1",
        "MLFLOW_PORT": "15000",
        "LEADERBOARD_PORT": "18501",
        "MLFLOW_PUBLIC_URL": "http://127.0.0.1:15000",
        "MLFLOW_PUBLIC_HOST": "127.0.0.1",
    }
    env_file = directory / "stack.env"
    env_file.write_text("".join(f"{key}={value}\n" for key, value in variables.items()))
    reset_databases()
    init = subprocess.run(  # what the postgres image runs on an empty volume
        ["bash", str(ROOT / "docker/postgres/init.sh")],
        env={**os.environ, **variables, "PGHOST": "127.0.0.1"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert init.returncode == 0, init.stderr
    deployed = Stack(env_file, variables, 0.0)
    deployed.compose("down", "-v")  # whatever an interrupted run left
    try:
        deployed.healthy_s = deployed.up()
        print(f"\nstack healthy {deployed.healthy_s:.0f} s after `up -d`")
        yield deployed
    finally:
        deployed.compose("down", "-v")


@pytest.fixture(scope="module")
def suite_ran(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny suite run in a container of the scheduler service (its database and MLflow)."""
    directory = tmp_path_factory.mktemp("suite")
    suite = write_suite(
        directory, "pre-ln: {}\nrms: {norm: {type: rmsnorm}}", steps=10, eval_every=5
    )
    directory.chmod(0o755)
    suite.chmod(0o644)
    ran = stack.compose(
        "run", "--rm", "-v", f"{directory}:/suites:ro", "scheduler",
        "layerbench", "run", "/suites/suite.yaml", "--workers", "2",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return suite


def mlflow_runs(stack: Stack) -> list[dict[str, object]]:
    request = urllib.request.Request(
        stack.url("mlflow") + "/api/2.0/mlflow/runs/search",
        data=json.dumps({"experiment_ids": [experiment_id(stack)]}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        runs: list[dict[str, object]] = json.load(response).get("runs", [])
        return runs


def experiment_id(stack: Stack) -> str:
    address = stack.url("mlflow") + "/api/2.0/mlflow/experiments/get-by-name?experiment_name=tiny"
    with urllib.request.urlopen(address, timeout=30) as response:
        return str(json.load(response)["experiment"]["experiment_id"])


def test_a_suite_run_in_a_container_stores_trials_in_postgresql_and_mlflow(
    stack: Stack, suite_ran: Path
) -> None:
    stored = trials_by_key(stack.db)
    assert len(stored) == 4
    assert all(t.status == "done" and t.mlflow_run_id for t in stored.values())
    runs = mlflow_runs(stack)
    assert {run["info"]["run_id"] for run in runs} == {t.mlflow_run_id for t in stored.values()}  # type: ignore[index]


def test_chromium_sees_the_ranked_table_on_the_containerized_leaderboard(
    stack: Stack, suite_ran: Path
) -> None:
    if chromium_path() is None:
        pytest.skip("Debian's chromium is not installed (`make chromium` installs it)")
    from playwright.sync_api import expect, sync_playwright

    from harness.ranking import rank
    from leaderboard import data

    leader = rank(data.outcomes(data.read_only_engine(stack.db), "tiny"), "val_loss", "pre-ln")
    with sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        top = open_leaderboard(page, stack.url("leaderboard") + "/?suite=tiny")
        expect(top).to_have_text(leader.summary[0].method)
        expect(page.get_by_text("Leaderboard: tiny")).to_be_visible()
        browser.close()


def test_down_then_up_keeps_every_result(stack: Stack, suite_ran: Path) -> None:
    before = {key: t.mlflow_run_id for key, t in trials_by_key(stack.db).items()}
    runs_before = {run["info"]["run_id"] for run in mlflow_runs(stack)}  # type: ignore[index]
    down = stack.compose("down")  # the volumes stay
    assert down.returncode == 0, down.stderr
    stack.up()
    after = {key: t.mlflow_run_id for key, t in trials_by_key(stack.db).items()}
    assert after == before
    assert {run["info"]["run_id"] for run in mlflow_runs(stack)} == runs_before  # type: ignore[index]
    listing = stack.url("mlflow") + "/api/2.0/mlflow/artifacts/list?run_id="
    with urllib.request.urlopen(listing + next(iter(runs_before)), timeout=30) as response:
        assert json.load(response).get("files"), "the run's artifacts (a volume) are gone"


def test_the_leaderboard_role_cannot_write(stack: Stack, suite_ran: Path) -> None:
    attempt = (
        "import os, sqlalchemy as sa\n"
        "engine = sa.create_engine(os.environ['LAYERBENCH_DB'])\n"
        "with engine.begin() as c:\n"
        "    print(c.execute(sa.text('select count(*) from trials')).scalar())\n"
        "try:\n"
        "    with engine.begin() as c:\n"
        "        c.execute(sa.text(\"update trials set status = 'failed'\"))\n"
        "except sa.exc.DBAPIError as error:\n"
        "    print(type(error.orig).__name__)\n"
    )
    ran = stack.compose("exec", "-T", "leaderboard", "python", "-c", attempt)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    count, error = ran.stdout.split()
    assert count == "4"
    assert error in ("ReadOnlySqlTransaction", "InsufficientPrivilege"), ran.stdout
