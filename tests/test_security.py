"""Security: plain-data suites, announced plugins, names kept intact, secrets kept out of sight."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from sqlalchemy import create_engine, inspect, text
from streamlit.testing.v1 import AppTest

from leaderboard.serve import streamlit_args
from leaderboard.state import engine as app_engine
from leaderboard.text import plain
from tests.factories import ROOT, invoke

PASSWORD = "Sup3r-S3cret-pw"
ODD_NAMES = ["o'brien\"; DROP TABLE trials; -- **b** <i>", "ünï-名前 ✓ :smile:"]


def test_validate_says_plugins_run_code_before_running_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "noisy_plugin.py").write_text(
        "import sys\nprint('PLUGIN CODE RAN', file=sys.stderr)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "suite: p\nplugins: [noisy_plugin]\nmodels: {g: {type: gpt, n_layers: 1, d_model: 16, "
        "n_heads: 2}}\ntasks: {t: {type: lm, corpus: shakespeare, tokenizer: byte}}\n"
        "methods: {a: {}}\n"
    )
    result = invoke("validate", str(suite))
    assert result.exit_code == 0, result.output
    note = result.output.index("importing them runs their code: noisy_plugin")
    assert note < result.output.index("PLUGIN CODE RAN")


@pytest.mark.parametrize(
    "name",
    [*ODD_NAMES, "- a list?", "1. ordered?", "`code` & &amp; $x$ [l](javascript:alert(1)) # h"],
)
def test_names_are_escaped_for_streamlit_markdown(name: str) -> None:
    rendered = MarkdownIt().render(plain(name))
    shown = name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    shown = shown.replace('"', "&quot;")
    assert rendered == f"<p>{shown}</p>\n"


def test_the_leaderboard_listens_on_localhost_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert streamlit_args(8501)[streamlit_args(8501).index("--server.address") + 1] == "127.0.0.1"
    launched: list[list[str]] = []
    monkeypatch.setattr(os, "execve", lambda _path, argv, _env: launched.append(argv))
    invoke("leaderboard")
    assert launched[0][launched[0].index("--address") + 1] == "127.0.0.1"


def test_an_unreachable_database_error_hides_the_password() -> None:
    url = f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:1/nowhere"
    result = invoke("status", "--db", url)
    assert result.exit_code == 2
    assert "postgres:***@127.0.0.1:1/nowhere" in result.output
    assert PASSWORD not in result.output


def secret_suite(directory: Path) -> Path:
    methods = "\n".join(f"  {json.dumps(name)}: {{norm: {{type: rmsnorm}}}}" for name in ODD_NAMES)
    path = directory / "secret.yaml"
    path.write_text(
        "suite: secret\nseeds: [0]\nplugins: [tests.plugins.boom]\n"
        "defaults: {train: {steps: 2, batch_size: 4, eval_every: 1, eval_batches: 1}}\n"
        "models: {g: {type: gpt, n_layers: 1, d_model: 16, n_heads: 2, max_seq_len: 32}}\n"
        "tasks: {t: {type: lm, corpus: shakespeare, tokenizer: byte, seq_len: 16}}\n"
        f"methods:\n  pre-ln: {{}}\n  boom: {{optimizer: {{name: boom}}}}\n{methods}\n"
        "baseline: pre-ln\n"
    )
    return path


def database_text(url: str) -> str:
    """Every row of every table, as text."""
    engine = create_engine(url)
    with engine.connect() as connection:
        return "\n".join(
            str(row[0])
            for table in inspect(engine).get_table_names()
            for row in connection.execute(text(f'SELECT CAST(t AS text) FROM "{table}" t'))
        )


def app_text(monkeypatch: pytest.MonkeyPatch, url: str, page: str, **query: str) -> str:
    """The text of every element on a leaderboard page."""
    monkeypatch.setenv("LAYERBENCH_DB", url)
    at = AppTest.from_file(str(ROOT / "leaderboard" / "app.py"), default_timeout=60)
    at.query_params.update(query)
    at.run()
    if page != "leaderboard":
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.message for e in at.exception]
    parts = [
        str(element.value)
        for kind in (
            "markdown",
            "caption",
            "title",
            "subheader",
            "warning",
            "info",
            "error",
            "code",
        )
        for element in getattr(at, kind)
    ]
    parts += [str(cell) for frame in at.dataframe for cell in frame.value.to_numpy().ravel()]
    return "\n".join(parts)


@pytest.mark.slow
def test_odd_names_intact_and_the_password_nowhere(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = postgres_url.replace("postgres@", f"postgres:{PASSWORD}@")
    suite = str(secret_suite(tmp_path))
    outputs = [invoke("run", suite, "--db", url)]
    assert outputs[0].exit_code == 1, outputs[0].output  # the boom trial fails, by design
    outputs += [
        invoke(*args)
        for args in (
            ["rank", suite, "--db", url, "--format", "json"],
            ["rank", suite, "--db", url, "--format", "md"],
            ["status", "--db", url],
            ["plan", suite, "--db", url],
            ["db", "upgrade", "--db", url],
        )
    ]
    ranked = json.loads(outputs[1].stdout)
    assert {row["method"] for row in ranked["rows"]} == {"pre-ln", "boom", *ODD_NAMES}
    stored = database_text(postgres_url)
    assert "boom: this optimizer always fails" in stored  # a stored traceback
    board = app_text(monkeypatch, url, "leaderboard")
    assert all(name in board for name in ODD_NAMES)
    with create_engine(postgres_url).connect() as connection:
        key = connection.execute(text("SELECT key FROM trials WHERE method = 'boom'")).scalar()
    trial_page = app_text(monkeypatch, url, "trial", key=key)
    files = b"\n".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    seen = {
        "command output": "\n".join(o.output for o in outputs),
        "database rows (tracebacks, configs)": stored,
        "leaderboard": board + trial_page,
        "files (MLflow store and artifacts, logs)": files.decode("utf-8", "replace"),
    }
    assert "boom: this optimizer always fails" in seen["files (MLflow store and artifacts, logs)"]
    assert {where for where, content in seen.items() if PASSWORD in content} == set()


@pytest.mark.slow
def test_the_leaderboard_session_is_read_only_on_postgresql(postgres_url: str) -> None:
    from harness.store.db import open_database

    open_database(postgres_url)
    with app_engine(postgres_url).connect() as connection:
        assert connection.execute(text("SHOW default_transaction_read_only")).scalar() == "on"
        with pytest.raises(Exception, match="read-only transaction"):
            connection.execute(text("INSERT INTO suite_runs (suite) VALUES ('x')"))
