"""A log location never fails a command (issue 37): `layerbench` run as an unprivileged user in a
read-only working folder on a PostgreSQL database, as the Docker image's user runs it, works and
prints LayerBench's own lines; the third-party log file falls back to the cache folder, else to
none, and one line says so."""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import logs
from tests.factories import ROOT
from tests.test_quiet import SUITE

USER = "nobody"


def switch_user() -> list[str]:
    """The command prefix that runs a program as `USER`, with no supplementary groups: it may
    write only where `USER` may, and read everywhere (CAP_DAC_READ_SEARCH, which grants no
    write: the interpreter may live in root's home, as pyenv's does)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("switching to an unprivileged user needs root and util-linux's setpriv")
    account = pwd.getpwnam(USER)
    return [
        "setpriv",
        f"--reuid={account.pw_uid}",
        f"--regid={account.pw_gid}",
        "--clear-groups",
        "--inh-caps=+dac_read_search",
        "--ambient-caps=+dac_read_search",
        "--reset-env",
    ]


def open_folder() -> Path:
    """A new folder under /tmp that every user may read (pytest's own are closed to others)."""
    folder = Path(tempfile.mkdtemp(prefix="layerbench-", dir="/tmp"))
    folder.chmod(0o755)
    return folder


@pytest.fixture
def read_only_folder() -> Iterator[Path]:
    """A working folder owned by root, which `USER` may read but not write, holding the suite."""
    folder = open_folder()
    (folder / "suite.yaml").write_text(SUITE)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def user_home() -> Iterator[Path]:
    """A home folder `USER` owns."""
    home = open_folder()
    os.chown(home, pwd.getpwnam(USER).pw_uid, -1)
    yield home
    shutil.rmtree(home, ignore_errors=True)


def layerbench_as_user(
    folder: Path, database: str, cache: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cache.parent),
        "PYTHONPATH": str(ROOT),
        "LAYERBENCH_DB": database,
        "LAYERBENCH_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "COLUMNS": "200",  # Rich wraps at 80 otherwise
    }
    command = [*switch_user(), "env", *(f"{k}={v}" for k, v in env.items())]
    return subprocess.run(
        [*command, sys.executable, "-m", "harness", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_an_unwritable_cache_leaves_no_log_file_and_says_so_once(
    read_only_folder: Path, postgres_url: str
) -> None:
    """The container's first command: `db upgrade` on a server database (Alembic logs INFO
    records), with neither the working folder nor the cache writable."""
    cache = read_only_folder / "cache"  # inside the read-only folder: cannot be made
    done = layerbench_as_user(read_only_folder, postgres_url, cache, "db", "upgrade")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "is at the latest schema" in done.stdout
    beside = read_only_folder / "layerbench.log"
    assert done.stderr.splitlines() == [
        f"note: cannot write the log file {beside}, so third-party messages are not kept "
        "(--verbose shows them)"
    ]
    assert not beside.exists() and not cache.exists()


@pytest.mark.slow
def test_a_run_falls_back_to_the_cache_and_prints_its_own_lines(
    read_only_folder: Path, user_home: Path, postgres_url: str
) -> None:
    """A whole run in the read-only folder: the log file is the cache's, and the trial
    processes (which inherit it) write there too (the int8 trial imports torchao, whose "Failed
    to load ..." lines are third-party)."""
    cache = user_home / ".cache" / "layerbench"
    done = layerbench_as_user(
        read_only_folder, postgres_url, cache, "run", "suite.yaml", "--no-mlflow"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    note = (
        f"note: cannot write the log file {read_only_folder / 'layerbench.log'}, so "
        f"third-party messages go to {cache / 'layerbench.log'} (--verbose shows them)"
    )
    assert done.stderr.splitlines()[0] == note
    assert done.stderr.count("note: cannot write") == 1
    written = (cache / "layerbench.log").read_text()
    assert "Running upgrade" in written and "torchao" in written  # Alembic's INFO, a trial's
    assert "torchao" not in done.stdout + done.stderr
    assert not (read_only_folder / "layerbench.log").exists()


def test_a_log_file_that_fails_on_its_first_record_drops_it(
    tmp_path: Path, restored_logging: None
) -> None:
    """`FileHandler.emit` opens its delayed file outside the `try` that calls `handleError`: a
    file that cannot be opened (here: its path is a folder) drops the record, raising nothing."""
    folder = tmp_path / "a-folder.log"
    folder.mkdir()
    handler = logs.LogFile(folder)
    record = logging.LogRecord("somelibrary", logging.WARNING, __file__, 1, "chatter", None, None)
    handler.emit(record)
    handler.close()
