"""`layerbench report SUITE --html FILE`: one self-contained file that Chromium renders offline."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchmarks.browser import chromium_path, launch
from harness.cli import app

pytestmark = pytest.mark.slow  # the browser

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "suites" / "findings" / "mix-ln.yaml"
DB = ROOT / "docs" / "results" / "data" / "findings-mix-ln.db"


@pytest.fixture
def database(tmp_path: Path) -> str:
    """A copy of the committed results of the Mix-LN findings suite."""
    (tmp_path / "db").mkdir()
    copy = tmp_path / "db" / "mix-ln.db"
    shutil.copyfile(DB, copy)
    return f"sqlite:///{copy}"


def test_the_html_report_renders_offline_in_chromium(database: str, tmp_path: Path) -> None:
    if chromium_path() is None:
        pytest.skip("Debian's chromium is not installed (`make chromium` installs it)")
    from playwright.sync_api import Route, expect, sync_playwright

    out = tmp_path / "out.html"
    done = CliRunner().invoke(app, ["report", str(SUITE), "--db", database, "--html", str(out)])
    assert done.exit_code == 0, done.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db", "out.html"]  # one file
    text = out.read_text()
    assert "<script src=" not in text  # the plotly bundle is inline, nothing is fetched
    assert "tie group" in text and "Findings" in text and "layerbench report" in text
    requested: list[str] = []

    def refuse(route: Route) -> None:
        requested.append(route.request.url)
        route.abort()

    with sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.route("http*://**", refuse)  # offline: any network request fails (and is listed)
        page.goto(out.as_uri())
        expect(page.locator("table").first).to_contain_text("mix-ln")
        expect(page.get_by_text("claim verdict").first).to_be_visible()
        findings = page.locator("table", has=page.get_by_text("claim verdict"))
        expect(findings).to_contain_text("planned-looks interval of Δ")  # the rule used
        verdicts = findings.locator("tbody tr td:last-child")
        edges = [verdicts.nth(i).bounding_box() for i in range(verdicts.count())]
        assert edges and all(b and b["x"] + b["width"] <= 1400 for b in edges)  # none cut off
        assert page.evaluate("document.documentElement.scrollWidth") <= 1400
        plots = page.locator(".js-plotly-plot .main-svg")
        expect(plots.first).to_be_visible(timeout=30_000)
        assert plots.count() >= 2
        browser.close()
    assert requested == []


def test_rank_json_gives_each_trial_the_command_that_reruns_it(database: str) -> None:
    done = CliRunner().invoke(app, ["rank", str(SUITE), "--db", database, "--format", "json"])
    assert done.exit_code == 0, done.output
    row = json.loads(done.stdout)["rows"][0]
    trial = row["trials"][0]
    assert trial["command"] == (
        f"layerbench run {SUITE} --only method={row['method']},model={row['model']},"
        f"task={row['task']},seed={trial['seed']} --force"
    )
    assert row["tie_group"] is not None
