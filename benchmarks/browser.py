"""Serving the leaderboard and driving Debian's Chromium with playwright (benchmark and tests).

Chromium is the distribution's (`shutil.which("chromium")`); never `playwright install`.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Browser, Locator, Page, Playwright

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TABLE = '[data-testid="stDataFrame"]'
# Glide's accessible cells are glide-cell-COLUMN-ROW; column 2 of the Overall table is the method
# (after position and tie group).
TOP_METHOD_CELL = '[data-testid="glide-cell-2-0"]'
START_TIMEOUT_S = 60


def chromium_path() -> str | None:
    return shutil.which("chromium")


def launch(playwright: Playwright) -> Browser:
    return playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def serve(url: str, log: Path | None = None) -> Iterator[str]:
    """`layerbench leaderboard --db URL` on a free port until the block ends; yields its address."""
    port = free_port()
    command = [sys.executable, "-m", "harness", "leaderboard", "--db", url, "--port", str(port)]
    with open(log or "/dev/null", "wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_for_port(port, server)
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.terminate()
        server.wait(timeout=30)


def _wait_for_port(port: int, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the leaderboard server exited with code {server.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"the leaderboard server did not listen on port {port}")


def open_leaderboard(page: Page, address: str, timeout_s: float = START_TIMEOUT_S) -> Locator:
    """Open the app and wait for its ranked table (a cold server's first page can be blank)."""
    page.goto(address)
    page.wait_for_selector(TABLE, timeout=timeout_s * 1000)
    return page.locator(TABLE).first.locator(TOP_METHOD_CELL)
