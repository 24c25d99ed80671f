"""A rank's process of a trial over several processes, started by torch's elastic launcher
(`harness.runner.distributed.launch`): `python -m harness.runner.rank CONFIG_FILE KEY`."""

from __future__ import annotations

import json
import os
import sys
from multiprocessing.connection import Client, Connection
from pathlib import Path

from harness.core import Status
from harness.runner.distributed import ADDRESS_ENV, AUTH_ENV, Report
from harness.runner.process import die_with_parent, quiet_libraries
from harness.runner.trial import run_trial


def rank_report(conn: Connection | None) -> Report | None:
    if conn is None:
        return None
    return lambda step, total, loss: conn.send(("progress", step, total, loss))


def main(config_path: str, key: str) -> int:
    """A rank's process, started by the launcher: run the trial as one of its ranks; rank 0
    sends its progress and result to the launcher. A rank whose trial failed exits 1, so the
    launcher ends the others (which would wait for it in a collective)."""
    die_with_parent()
    quiet_libraries()
    config = json.loads(Path(config_path).read_text())
    conn = None
    if int(os.environ["RANK"]) == 0:
        host, port = os.environ[ADDRESS_ENV].rsplit(":", 1)
        conn = Client((host, int(port)), authkey=bytes.fromhex(os.environ[AUTH_ENV]))
    result = run_trial(config, rank_report(conn), key or None)
    if conn is not None:
        conn.send(("result", result))
        conn.close()
    if result.status is Status.FAILED:
        print(result.error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
