"""Links from a trial to its Trial page and to its MLflow run."""

from __future__ import annotations

import os
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
