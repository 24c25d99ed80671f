"""Which results database: the URL the commands default to. No SQLAlchemy import, so the CLI's
group callback (which places third-party logs beside the database) costs nothing before a
subcommand's `--help` (issue 23)."""

from __future__ import annotations

import os

DEFAULT_URL = "sqlite:///layerbench.db"


def database_url(url: str | None = None) -> str:
    """`url`, else $LAYERBENCH_DB, else `DEFAULT_URL` (a SQLite file in the working folder)."""
    return url or os.environ.get("LAYERBENCH_DB") or DEFAULT_URL
