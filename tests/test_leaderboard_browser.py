"""`layerbench leaderboard` served for real and opened in Debian's Chromium through playwright."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from benchmarks.browser import (
    START_TIMEOUT_S,
    TABLE,
    chromium_path,
    launch,
    open_leaderboard,
    serve,
)
from harness.ranking import rank
from leaderboard import data
from leaderboard.findings import COLUMNS as FINDINGS_COLUMNS
from tests.test_findings import record_claims, store_claims_suite
from tests.test_leaderboard import store_tiny_suite

pytestmark = pytest.mark.slow  # real trials, subprocesses or the app


@pytest.fixture
def chromium() -> None:
    if chromium_path() is None:
        if os.environ.get("CI"):
            raise AssertionError("Debian's chromium is not installed: run `make chromium`")
        pytest.skip("Debian's chromium is not installed (`make chromium` installs it)")


def test_the_leaderboard_and_findings_pages_in_chromium(chromium: None, tmp_path: Path) -> None:
    """The top method in the Leaderboard's first row; the claims' verdicts on Findings."""
    from playwright.sync_api import expect, sync_playwright

    url = os.environ["LAYERBENCH_DB"]
    store_tiny_suite(tmp_path, url)
    (tmp_path / "claims").mkdir()
    record_claims(store_claims_suite(tmp_path / "claims"))
    verdict = FINDINGS_COLUMNS.index("verdict")
    ranking = rank(data.outcomes(data.read_only_engine(url), "tiny"), "val_loss", "pre-ln")
    leader = ranking.summary[0].method
    assert leader == "rms"  # not the baseline, nor the first name: the check means something
    screenshot = tmp_path / "leaderboard.png"
    with serve(url, tmp_path / "server.log") as address, sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        first_row_method = open_leaderboard(page, address + "?suite=tiny")
        expect(first_row_method).to_have_text(leader)
        expect(page.get_by_text("Leaderboard: tiny")).to_be_visible()
        page.screenshot(path=screenshot, full_page=True)
        page.goto(address + "findings")
        page.wait_for_selector(TABLE, timeout=START_TIMEOUT_S * 1000)
        findings = page.locator(TABLE).first
        # All suites, by verdict (record_claims gives the tiny suite the claims too)
        # (the tiny suite's post-ln diverges on a seed: its verdicts read "... (failures)")
        verdicts = ["reproduced", "reproduced", "contradicted", "contradicted"]
        for row, expected in enumerate(verdicts):
            cell = findings.locator(f'[data-testid="glide-cell-{verdict}-{row}"]')
            expect(cell).to_have_text(re.compile(f"^{expected}( \\(failures\\))?$"))
        assert findings.bounding_box()["width"] <= 1400 - 300  # beside the sidebar, no scroll
        page.locator('[data-testid="stRadioOption"]').filter(has_text="claims").click()
        one_suite = findings.locator(f'[data-testid="glide-cell-{verdict - 1}-1"]')
        expect(one_suite).to_have_text("contradicted")  # the suite column is gone
        browser.close()
    assert screenshot.stat().st_size > 10_000


def test_the_history_page_shows_a_regression_on_the_curve_in_chromium(
    chromium: None, tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    from harness.store.db import open_database
    from tests.test_nightly import SUITE, nightly_history

    url = os.environ["LAYERBENCH_DB"]
    suite = tmp_path / "nightly.yaml"
    suite.write_text(SUITE)
    nightly_history(open_database(url), suite)
    screenshot = tmp_path / "history.png"
    with serve(url, tmp_path / "server.log") as address, sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(address + "history")
        expect(page.get_by_text("Alerts (2)")).to_be_visible(timeout=60_000)
        legend = page.locator(".js-plotly-plot .legendtext")
        expect(legend.filter(has_text="regression")).to_be_visible(timeout=30_000)
        page.screenshot(path=screenshot, full_page=True)
        browser.close()
    assert screenshot.stat().st_size > 10_000


def test_the_trial_page_shows_a_pretrained_models_layer_profiles_in_chromium(
    chromium: None, tmp_path: Path
) -> None:
    """An evaluated (tiny, pretrained) Llama: its hidden RMS, massive activations, block
    influence and attention-sink mass along depth, and its peak activation."""
    from playwright.sync_api import expect, sync_playwright

    from harness.runner.trial import run_trial
    from harness.spec import load_suite
    from harness.spec.plan import plan_suite
    from harness.store.db import make_engine, upgrade
    from tests.factories import store
    from tests.test_posttrain import pretrained_suite, save_tiny_pretrained

    url = os.environ["LAYERBENCH_DB"]
    suite = pretrained_suite(tmp_path, save_tiny_pretrained(tmp_path / "tiny"))
    trial = next(
        t for t in plan_suite(load_suite(suite)) if (t.method, t.task) == ("full", "held-out")
    )
    result = run_trial(trial.config)
    assert result.status == "done", result.error
    database = make_engine(url)
    upgrade(database)
    store(database, [(trial, result)])
    screenshot = tmp_path / "trial.png"
    with serve(url, tmp_path / "server.log") as address, sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(address + f"trial?suite=compress&key={trial.key}")
        expect(page.get_by_text("Layer profiles")).to_be_visible(timeout=START_TIMEOUT_S * 1000)
        expect(page.get_by_text(re.compile(r"^Peak activation .* channel \d+"))).to_be_visible()
        titles = page.locator(".js-plotly-plot .gtitle")
        for name in ("hidden_rms", "max_abs_activation", "block_influence", "attention_sink"):
            expect(titles.filter(has_text=re.compile(f"^{name}$"))).to_be_visible(timeout=30_000)
        expect(titles.filter(has_text="attention_sink per head")).to_be_visible()
        titles.filter(has_text="block_influence").scroll_into_view_if_needed()
        page.screenshot(path=screenshot)
        browser.close()
    assert screenshot.stat().st_size > 10_000
