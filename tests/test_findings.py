"""Findings: `expect` claims in a suite, and their verdicts (reproduced, contradicted,
inconclusive, fragile) from constructed outcomes."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import parse_qsl

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from sqlalchemy import update
from sqlalchemy.orm import Session
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from benchmarks.browser import chromium_path
from benchmarks.fake_results import fake_result, store
from harness.cli import app
from harness.core import TrialOutcome
from harness.ranking.findings import Finding, findings
from harness.runner.plan import plan_suite
from harness.spec import SuiteError, load_suite
from harness.spec.declaration import declared_ranking
from harness.spec.schema import Claim
from harness.store.db import make_engine, upgrade
from harness.store.models import SuiteRun
from leaderboard.findings import RECIPE_TEXT
from tests.helpers import ROOT, write_suite

runner = CliRunner()
METHODS = "pre-ln: {}\npost-ln: {norm: {placement: post}}"


def claims_suite(tmp_path: Path, expect: str) -> Path:
    return write_suite(tmp_path, METHODS, extra=f"expect:\n{expect}")


def problems_of(path: Path) -> list[str]:
    with pytest.raises(SuiteError) as caught:
        load_suite(path)
    return [str(problem) for problem in caught.value.problems]


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_claim_than_defaults_to_the_baseline(tmp_path: Path) -> None:
    path = claims_suite(
        tmp_path, "  - {method: post-ln, direction: worse, source: arXiv:2002.04745}\n"
    )
    (claim,) = load_suite(path).expect
    assert (claim.method, claim.than, claim.direction) == ("post-ln", None, "worse")


def test_unknown_claim_method_is_located_with_a_suggestion(tmp_path: Path) -> None:
    path = claims_suite(tmp_path, "  - {method: post-lm, direction: worse, source: x}\n")
    (problem,) = problems_of(path)
    assert problem == (
        f"{path}:{line_of(path, 'post-lm')}: expect.0.method: "
        "unknown method 'post-lm'; did you mean 'post-ln'?"
    )
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert "unknown method 'post-lm'" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("claim", "expected"),
    [
        ("{method: post-ln, direction: tie, source: x}", "a `tie` needs a `margin`"),
        ("{method: post-ln, direction: worse, margin: 0.1, source: x}", "only for direction `tie`"),
        ("{method: post-ln, direction: worst, source: x}", "expect.0.direction"),
        (
            "{method: post-ln, direction: worse, source: x, metric: val_los}",
            "did you mean 'val_loss'",
        ),
        (
            "{method: post-ln, direction: worse, source: x, recipes: [gpt-3l]}",
            "did you mean 'gpt-2l'",
        ),
        ("{method: pre-ln, direction: worse, source: x}", "compared with itself"),
        ("{method: post-ln, direction: worse}", "expect.0.source"),
    ],
)
def test_invalid_claims_are_located(tmp_path: Path, claim: str, expected: str) -> None:
    path = claims_suite(tmp_path, f"  - {claim}\n")
    (problem,) = problems_of(path)
    assert problem.startswith(f"{path}:{line_of(path, '- {method')}: expect.0")
    assert expected in problem


def test_a_recipe_where_the_methods_never_meet_is_an_error(tmp_path: Path) -> None:
    extra = (
        "matrix:\n  - {methods: [pre-ln], models: [gpt-2l], tasks: [bytes]}\n"
        "  - {methods: [post-ln], models: [gpt-2l-untied], tasks: [bytes]}\n"
        "expect:\n  - {method: post-ln, direction: worse, source: x, recipes: [gpt-2l-untied]}\n"
    )
    path = write_suite(tmp_path, METHODS, extra=extra)
    text = path.read_text().replace(
        "models:\n",
        "models:\n  gpt-2l-untied: {type: gpt, n_layers: 2, d_model: 32, n_heads: 2, "
        "max_seq_len: 64, tie_embeddings: false}\n",
        1,
    )
    path.write_text(text)
    (problem,) = problems_of(path)
    assert "never both run on model 'gpt-2l-untied'" in problem


def test_shipped_findings_suites_are_valid() -> None:
    paths = sorted((ROOT / "suites" / "findings").glob("*.yaml"))
    assert len(paths) == 9
    result = runner.invoke(app, ["validate", *map(str, paths)])
    assert result.exit_code == 0, result.output
    for path in paths:
        suite = load_suite(path)
        assert len(suite.seed_list) >= 5 and suite.expect, path  # a list, or a schedule's max


def outcomes(
    offsets: list[float], model: str = "gpt", method: str = "post-ln", metric: str = "val_loss"
) -> list[TrialOutcome]:
    """Pre-LN at 2.0 + a seed effect, `method` at the same + offsets[seed]; None: diverged."""
    found = []
    for seed, offset in enumerate(offsets):
        base = 2.0 + 0.1 * seed
        found.append(TrialOutcome("pre-ln", model, "lm", seed, "done", {metric: base}))
        status, metrics = ("diverged", {}) if offset is None else ("done", {metric: base + offset})
        found.append(TrialOutcome(method, model, "lm", seed, status, metrics))
    return found


def claim(**fields: object) -> Claim:
    return Claim.model_validate({"method": "post-ln", "source": "test"} | fields)


def verdicts(found: list[TrialOutcome], *claims: Claim) -> list[Finding]:
    return findings(found, claims, baseline="pre-ln", metric="val_loss")


CLEAR = [0.50, 0.52, 0.49, 0.51, 0.50]
NOISY = [0.30, -0.25, 0.10, -0.05, 0.02]


def test_a_significant_difference_the_expected_way_reproduces() -> None:
    (found,) = verdicts(outcomes(CLEAR), claim(direction="worse"))
    (check,) = found.checks
    assert found.verdict == "reproduced" and check.decided_by == "test"
    assert check.seeds_needed is None  # decided: no power figure to read as "under-powered"
    assert check.n == 5 and check.delta == pytest.approx(0.504)
    assert check.ci_low < 0.504 < check.ci_high and check.p_value < 1e-4
    assert found.claim == "post-ln worse than pre-ln on val_loss"


def test_a_significant_difference_the_other_way_contradicts() -> None:
    (found,) = verdicts(outcomes(CLEAR), claim(direction="better"))
    assert found.verdict == "contradicted"


def test_a_noisy_difference_is_inconclusive_with_the_seeds_it_needs() -> None:
    (found,) = verdicts(outcomes(NOISY), claim(direction="worse"))
    (check,) = found.checks
    assert found.verdict == "inconclusive" and check.p_value > 0.05
    assert check.seeds_needed is not None and check.seeds_needed > 5


def test_a_tie_needs_the_interval_inside_the_margin() -> None:
    small = [0.001, -0.002, 0.0, 0.002, -0.001]
    (tie,) = verdicts(outcomes(small), claim(direction="tie", margin=0.05))
    assert tie.verdict == "reproduced" and tie.checks[0].decided_by == "interval"
    assert tie.checks[0].ci_low >= -0.05 and tie.checks[0].ci_high <= 0.05
    (apart,) = verdicts(outcomes(CLEAR), claim(direction="tie", margin=0.05))
    assert apart.verdict == "contradicted"
    (wide,) = verdicts(outcomes(NOISY), claim(direction="tie", margin=0.05))
    assert wide.verdict == "inconclusive"
    assert wide.checks[0].p_value is None


def test_more_failed_seeds_lose_without_a_test() -> None:
    (found,) = verdicts(outcomes([None, None, 0.0, 0.01, -0.01]), claim(direction="worse"))
    (check,) = found.checks
    assert found.verdict == "reproduced" and check.decided_by == "failures"
    assert check.failed == (2, 0) and check.n == 3


def test_a_verdict_that_flips_between_recipes_is_fragile() -> None:
    found = outcomes(CLEAR, model="tied") + outcomes([-x for x in CLEAR], model="untied")
    (fragile,) = verdicts(found, claim(direction="better", recipes=["untied", "tied"]))
    assert [c.model for c in fragile.checks] == ["untied", "tied"]
    assert [c.verdict for c in fragile.checks] == ["reproduced", "contradicted"]
    assert fragile.verdict == "fragile" and fragile.flipped_by == ["tied"]
    (steady,) = verdicts(found, claim(direction="better", recipes=["untied"]))
    assert steady.verdict == "reproduced" and not steady.flipped_by


def test_holm_adjusts_over_the_suites_directional_claims() -> None:
    found = outcomes(NOISY) + outcomes(CLEAR, method="peri-ln")
    noisy, clear = claim(direction="worse"), claim(method="peri-ln", direction="worse")
    ((alone_noisy,), (alone_clear,)) = verdicts(found, noisy), verdicts(found, clear)
    both = verdicts(found, noisy, clear)
    # step-down: the smaller p is doubled, the larger kept
    assert both[1].checks[0].p_value == pytest.approx(2 * alone_clear.checks[0].p_value)
    assert both[0].checks[0].p_value == pytest.approx(alone_noisy.checks[0].p_value)
    assert [f.verdict for f in both] == ["inconclusive", "reproduced"]


def test_a_claim_without_outcomes_has_no_data() -> None:
    (found,) = verdicts(outcomes(CLEAR), claim(method="peri-ln", direction="worse"))
    assert found.verdict == "no data" and not found.checks


EXPECT = """expect:
  - {method: post-ln, direction: worse, source: "arXiv:2002.04745, Fig. 3"}
  - {method: post-ln, direction: better, source: made-up}
"""


def store_claims_suite(directory: Path) -> Path:
    """A suite with two claims, and fake results: post-ln ends 0.1 above pre-ln on 5 seeds."""
    suite = write_suite(directory, METHODS, extra=EXPECT)
    text = suite.read_text().replace("seeds: [0, 1]", "seeds: [0, 1, 2, 3, 4]")
    suite.write_text(text.replace("suite: tiny", "suite: claims"))
    database = make_engine(os.environ["LAYERBENCH_DB"])
    upgrade(database)
    loss = {"pre-ln": 1.5, "post-ln": 1.6}
    trials = plan_suite(load_suite(suite))
    rng = np.random.default_rng(0)
    store(database, [(t, fake_result("done", loss[t.method] + 0.01 * t.seed, rng)) for t in trials])
    return suite


def test_rank_adds_a_findings_block(tmp_path: Path) -> None:
    suite = store_claims_suite(tmp_path)
    ranked = runner.invoke(app, ["rank", str(suite), "--format", "json"])
    assert ranked.exit_code == 0, ranked.output
    worse, better = json.loads(ranked.stdout)["findings"]
    assert (worse["verdict"], better["verdict"]) == ("reproduced", "contradicted")
    assert worse["checks"][0]["delta"] == pytest.approx(0.1, abs=0.03)
    assert worse["claim"] == "post-ln worse than pre-ln on val_loss"
    table = runner.invoke(app, ["rank", str(suite)])
    assert table.exit_code == 0 and "Findings" in table.output and "contradicted" in table.output
    markdown = runner.invoke(app, ["rank", str(suite), "--format", "md"]).output
    assert "### Findings" in markdown and "| arXiv:2002.04745, Fig. 3 |" in markdown


def record_claims(suite: Path) -> None:
    """Record the suite's ranking (with its claims) on its stored run, as `layerbench run` does."""
    ranking = declared_ranking(load_suite(suite))
    with Session(make_engine(os.environ["LAYERBENCH_DB"])) as session, session.begin():
        session.execute(update(SuiteRun).values(ranking=ranking.stored()))


def test_the_findings_page_shows_each_claims_verdict_and_links_to_compare(tmp_path: Path) -> None:
    record_claims(store_claims_suite(tmp_path))
    at = AppTest.from_file(str(ROOT / "leaderboard" / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("views/findings.py").run()
    assert not at.exception, [e.message for e in at.exception]
    frame = at.dataframe[0].value
    assert list(frame.columns[:4]) == ["suite", "claim", "recipe", "verdict"]
    assert list(frame["verdict"]) == ["reproduced", "contradicted"]
    assert list(frame["claim"]) == ["post-ln > pre-ln on val_loss", "post-ln < pre-ln on val_loss"]
    assert list(frame["suite"]) == ["claims", "claims"]
    assert frame["paper"][0] == "https://arxiv.org/abs/2002.04745"
    assert pd.isna(frame["paper"][1])  # "made-up" names no paper
    assert frame["Δ [95% CI]"][0].startswith("+0.1") and frame["seeds"][0] == "5"
    link = frame["recipe"][0]
    assert link.startswith("compare?") and "methods=post-ln%2Cpre-ln" in link
    assert re.search(RECIPE_TEXT, link).group(1) == "gpt-2l"  # the text the table shows
    details = at.expander[0].dataframe[0].value
    assert list(details["decided by"]) == ["test", "test"] and details["p (Holm)"][0] < 0.05
    assert r"arXiv\:2002.04745, Fig. 3" in at.expander[1].markdown[0].value

    at.radio[0].set_value("claims").run()
    assert list(at.dataframe[0].value.columns[:3]) == ["claim", "recipe", "verdict"]

    compare = AppTest.from_file(str(ROOT / "leaderboard" / "app.py"), default_timeout=60)
    compare.query_params.update(dict(parse_qsl(link.split("?", 1)[1])))
    compare.run()
    compare.switch_page("views/compare.py").run()
    assert not compare.exception, [e.message for e in compare.exception]
    (methods,) = (box for box in compare.multiselect if box.label == "Methods")
    assert methods.value == ["post-ln", "pre-ln"]


def test_report_writes_markdown_and_non_trivial_figures(tmp_path: Path) -> None:
    if chromium_path() is None:
        pytest.skip("Debian's chromium is not installed (`make chromium` installs it)")
    suite = store_claims_suite(tmp_path)
    out = tmp_path / "report"
    done = runner.invoke(app, ["report", str(suite), "--out", str(out)])
    assert done.exit_code == 0, done.output
    text = (out / "report.md").read_text()
    assert "### Findings" in text and "## Figures" in text
    figures = sorted((out / "figures").glob("*.png"))
    names = {path.stem for path in figures}
    assert {"findings_forest", "bytes_gpt-2l_curves"} <= names
    assert {"bytes_gpt-2l_grad_norm_pre-ln", "bytes_gpt-2l_hidden_rms_post-ln"} <= names
    for path in figures:
        assert f"figures/{path.name}" in text
        with Image.open(path) as image:
            assert image.format == "PNG" and image.width >= 800 and image.height >= 150
            assert len(image.getcolors(maxcolors=1 << 16) or range(1 << 16)) > 10  # not blank
    other = runner.invoke(app, ["report", str(suite), "--out", str(out), "--metric", "train_loss"])
    assert other.exit_code == 0, other.output
    assert "## train_loss (" in (out / "report.md").read_text()


def test_report_without_a_browser_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import plotly.io as pio
    from kaleido.errors import ChromeNotFoundError

    def no_browser(*args: object, **kwargs: object) -> None:
        try:  # what plotly does when kaleido finds no Chrome
            raise ChromeNotFoundError("no chrome")
        except ChromeNotFoundError:
            raise RuntimeError("Kaleido requires Google Chrome to be installed.") from None

    monkeypatch.setattr(pio, "write_images", no_browser)
    suite = store_claims_suite(tmp_path)
    done = runner.invoke(app, ["report", str(suite), "--out", str(tmp_path / "out")])
    assert done.exit_code == 2, done.output
    assert "install Debian's chromium" in done.output and "Traceback" not in done.output


def test_report_draws_again_a_figure_kaleido_silently_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import plotly.io as pio

    calls: list[int] = []

    def flaky(figures: list[object], paths: list[Path], **kwargs: object) -> None:
        calls.append(len(figures))  # the first call "times out" on its first figure
        for path in paths[1:] if len(calls) == 1 else paths:
            path.write_bytes(b"png")

    monkeypatch.setattr(pio, "write_images", flaky)
    suite = store_claims_suite(tmp_path)
    out = tmp_path / "out"
    done = runner.invoke(app, ["report", str(suite), "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert calls[1] == 1 and len(calls) == 2  # only the dropped figure was drawn again

    monkeypatch.setattr(pio, "write_images", lambda *a, **k: None)  # never draws anything
    done = runner.invoke(app, ["report", str(suite), "--out", str(out)])
    assert done.exit_code == 2 and "kaleido drew no image for" in done.output
    assert not list((out / "figures").glob("*.png"))  # the older report's images are gone


def test_report_without_results_is_one_clear_error(tmp_path: Path) -> None:
    suite = claims_suite(tmp_path, "  - {method: post-ln, direction: worse, source: x}\n")
    done = runner.invoke(app, ["report", str(suite), "--out", str(tmp_path / "out")])
    assert done.exit_code == 2
    assert "no stored results for suite 'tiny'" in done.output and "Traceback" not in done.output
