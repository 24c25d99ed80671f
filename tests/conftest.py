"""Shared fixtures: tiny suites that train in seconds on the CPU."""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterator
from multiprocessing import forkserver
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from click.testing import Result
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

# The factories (torch, transformers, the CLI: seconds of imports) are imported by the fixtures
# that hand them out, in the workers that run tests: xdist's controller process loads this file
# too, and runs no test.

# Ray (tests/test_ray.py, the ray-head service in tests/test_deploy.py) advertises the machine's
# address even when told 127.0.0.1; this Ray knob keeps every Ray of the tests on the loopback.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


# The longest test files (real clusters and servers, many trials), longest first. Under
# `--dist loadfile` a file runs whole on one worker; xdist would start the files with the most
# tests first, so these, which have few, would start last and one worker would finish long after
# the other. Started first, they leave the many short files to even the two workers out.
LONGEST_FIRST = (
    "test_ray.py",
    "test_slurm.py",
    "test_checkpoint.py",
    "test_nightly_suite.py",
    "test_lmeval.py",
    "test_runner.py",
    "test_sequential_run.py",
    "test_deploy.py",
    "test_compile.py",
    "test_reliability.py",
    "test_leaderboard_browser.py",
)


def pytest_configure(config: pytest.Config) -> None:
    """xdist hands out the files in the order of the collection (below), not by test count."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of LONGEST_FIRST first, in its order; the tests marked `finish_last` after
    every other test, in their order: what they wait for (Slurm's one-minute time limit)
    elapses while the others run."""

    def position(item: pytest.Item) -> tuple[bool, int]:
        name = item.path.name
        longest = LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)
        return item.get_closest_marker("finish_last") is not None, longest

    items.sort(key=position)


# Factories of tests/factories.py as fixtures, for tests that take them as arguments.


@pytest.fixture(name="write_suite", scope="session")
def write_suite_fixture() -> Callable[..., Path]:
    """`write_suite(directory, methods, steps=20, eval_every=10, extra="")`."""
    from tests.factories import write_suite

    return write_suite


@pytest.fixture(name="invoke", scope="session")
def invoke_fixture() -> Callable[..., Result]:
    """`invoke(*args)`: `layerbench ARGS` in this process (the tests' one CLI runner)."""
    from tests.factories import invoke

    return invoke


@pytest.fixture(name="tiny_llama", scope="session")
def tiny_llama_fixture() -> Callable[[int, int], LlamaForCausalLM]:
    """`tiny_llama(vocab_size, n_layers)`."""
    from tests.factories import tiny_llama

    return tiny_llama


@pytest.fixture(name="byte_bpe_tokenizer", scope="session")
def byte_bpe_tokenizer_fixture() -> Callable[..., PreTrainedTokenizerFast]:
    """`byte_bpe_tokenizer(texts, vocab_size=400)`."""
    from tests.factories import byte_bpe_tokenizer

    return byte_bpe_tokenizer


@pytest.fixture(name="scipy_percentile_ci", scope="session")
def scipy_percentile_ci_fixture() -> Callable[[list[float]], tuple[float, float]]:
    """`scipy_percentile_ci(values)`: the reference bootstrap CI."""
    from tests.factories import scipy_percentile_ci

    return scipy_percentile_ci


@pytest.fixture
def tiny_suite(tmp_path: Path) -> Path:
    from tests.factories import write_suite

    return write_suite(tmp_path, "pre-ln: {}\npost-ln: {norm: {placement: post}}")


@pytest.fixture(autouse=True, scope="session")
def one_intra_op_thread() -> None:
    """torch computes with one thread in the test processes, as every trial does (its
    `threads`): two workers of two threads each, beside the trials' processes, oversubscribe
    the two cores, and a tiny model's steps then wait on each other's threads (the
    diagnostics module's two 20-step trials in this process took minutes under load)."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def isolated_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test has its own default database and MLflow store, and runs offline."""
    from tests.factories import ROOT

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LAYERBENCH_DB", f"sqlite:///{tmp_path / 'layerbench.db'}")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # in-process commands route third-party logs (harness/logs.py): undone after each test
    monkeypatch.setenv("LAYERBENCH_LOG_FILE", str(tmp_path / "layerbench.log"))
    monkeypatch.setenv(
        "MLFLOW_CONFIGURE_LOGGING", os.environ.get("MLFLOW_CONFIGURE_LOGGING", "true")
    )
    monkeypatch.delenv("LAYERBENCH_VERBOSE", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


@pytest.fixture
def fresh_server() -> Iterator[None]:
    """No fork server left over from another test: run_local starts one warmed for this suite."""
    forkserver._forkserver._stop()  # type: ignore[attr-defined]
    yield


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh database on the local PostgreSQL server, dropped afterwards."""
    from sqlalchemy import create_engine, text

    from tests.factories import PG_ADMIN_URL

    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"layerbench_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as error:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"PostgreSQL is not reachable at {PG_ADMIN_URL}: {error}")
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    yield url
    create_engine(url).dispose()
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """Undo `route_logs` on the root logger (this process's other tests log as usual)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
        handler.close()
    root.setLevel(level)
    logging.captureWarnings(False)
