"""Links from a trial to its Trial page and to its MLflow run, and the suite file it came from."""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path
from urllib.parse import quote

from harness.env import tracking_uri

TRIAL_PAGE = "trial"
# The MLflow UI's address as a browser sees it, when it differs from the tracking URI.
MLFLOW_URL_ENV = "LAYERBENCH_MLFLOW_URL"


def mlflow_base_url() -> str | None:
    """The MLflow server's URL, if one is configured (a local SQLite store has no UI to link)."""
    url = os.environ.get(MLFLOW_URL_ENV) or tracking_uri()
    return url.rstrip("/") if url.startswith(("http://", "https://")) else None


def mlflow_run_url(run_id: str | None) -> str | None:
    base = mlflow_base_url()
    if base is None or not run_id:
        return None
    return f"{base}/#/runs/{quote(run_id)}"


def trial_page_url(key: str) -> str:
    return f"{TRIAL_PAGE}?key={quote(key)}"


SUITE_FOLDERS = (Path.cwd() / "suites", Path(__file__).resolve().parents[1] / "suites")


@cache
def suite_file(suite: str) -> str | None:
    """The suite file (under ./suites or the repository's suites/) whose `suite:` is `suite`,
    relative to the working directory when inside it; None when none is found."""
    line = re.compile(rf"^suite:\s*[\"']?{re.escape(suite)}[\"']?\s*(#.*)?$", re.MULTILINE)
    for folder in SUITE_FOLDERS:
        for path in sorted(folder.rglob("*.yaml")) if folder.is_dir() else []:
            if line.search(path.read_text(encoding="utf-8", errors="replace")):
                return str(
                    path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
                )
    return None
