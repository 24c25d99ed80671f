"""Findings: `expect` claims in a suite, and their verdicts (reproduced, contradicted,
inconclusive, not tested, flipped, recipe-dependent) from constructed outcomes."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path
from urllib.parse import parse_qsl

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from sqlalchemy import update
from sqlalchemy.orm import Session
from streamlit.testing.v1 import AppTest

from benchmarks.browser import chromium_path
from harness.claims import Finding, degenerate_pairs, findings
from harness.core import TrialOutcome
from harness.ranking.suite import RankPlan, ranked_metrics
from harness.spec import SuiteError, load_suite
from harness.spec.declaration import RankingDeclaration
from harness.spec.plan import plan_suite
from harness.spec.rank import Claim, RankSpec, SeedSchedule, TargetSpec
from harness.store.db import make_engine, upgrade
from harness.store.models import SuiteRun
from harness.tasks.trivial import trivial_name
from leaderboard.findings import RECIPE_TEXT
from tests.factories import ROOT, fake_result, invoke, store, write_suite

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
    result = invoke("validate", str(path))
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
    result = invoke("validate", *map(str, paths))
    assert result.exit_code == 0, result.output
    for path in paths:
        suite = load_suite(path)
        assert len(suite.seed_list) >= 3 and suite.expect, path  # a list, or a schedule's max


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
    assert check.needed_note is None


def test_no_seeds_needed_when_the_difference_points_the_other_way() -> None:
    (found,) = verdicts(outcomes(NOISY), claim(direction="better"))  # NOISY's mean is > 0
    (check,) = found.checks
    assert found.verdict == "inconclusive" and check.delta > 0
    assert check.seeds_needed is None
    assert check.needed_note == "the observed difference points the other way"


def test_the_holm_matched_interval_excludes_0_exactly_when_holm_p_is_below_alpha() -> None:
    found = outcomes(NOISY) + outcomes([0.1, 0.05, 0.12, 0.02, 0.09], method="peri-ln")
    noisy, clear = claim(direction="worse"), claim(method="peri-ln", direction="worse")
    for finding in verdicts(found, noisy, clear):
        (check,) = finding.checks
        assert check.holm_ci is not None and check.holm_level is not None
        low, high = check.holm_ci
        assert check.holm_level == pytest.approx(1 - 0.05 * check.p_raw / check.p_value)
        assert (low > 0 or high < 0) == (check.p_value < 0.05)
        assert check.ci_level == 0.95 and check.ci_low >= low  # the unadjusted one: narrower


def test_secondary_statistics_show_one_catastrophic_seed() -> None:
    (found,) = verdicts(outcomes([5.0, -0.01, -0.02, -0.01, -0.03]), claim(direction="worse"))
    (check,) = found.checks
    assert check.delta == pytest.approx(0.986)
    assert check.median_delta == pytest.approx(-0.01)
    assert check.signs == (1, 4)
    assert check.sign_p == pytest.approx(0.375)  # exact two-sided binomial, 1 of 5


def degenerate_outcomes(pre: float, post: float) -> list[TrialOutcome]:
    """pre-ln and post-ln at the given losses (+- a little noise), 5 seeds."""
    noise = [0.001, -0.002, 0.0, 0.002, -0.001]
    return [
        TrialOutcome(method, "gpt", "lm", seed, "done", {"val_loss": base + e * sign})
        for seed, e in enumerate(noise)
        for method, base, sign in (("pre-ln", pre, 1), ("post-ln", post, -1))
    ]


TRIVIAL = {"lm": {"val_loss": 3.33}}


def test_both_methods_at_the_trivial_predictor_is_not_tested() -> None:
    found = degenerate_outcomes(3.35, 3.351)  # e.g. learning rate 1e-7: neither trains
    worse, tie = findings(
        found,
        [claim(direction="worse"), claim(direction="tie", margin=0.05)],
        baseline="pre-ln",
        metric="val_loss",
        trivial=TRIVIAL,
    )
    for finding in (worse, tie):
        (check,) = finding.checks
        assert finding.verdict == "not tested" and check.verdict == "not tested"
        assert check.p_value is None and check.seeds_needed is None and check.holm_ci is None
        assert check.at_trivial == (5, 5) and check.finished == (5, 5)
        assert finding.verdict_text == (
            "not tested (degenerate: both stay at the trivial predictor)"
        )
    assert degenerate_pairs([worse, tie]) == {("post-ln", "pre-ln", "gpt", "lm")}
    # without a trivial level the same numbers are tested (and the difference is significant)
    (untested,) = verdicts(found, claim(direction="worse"))
    assert untested.verdict != "not tested"


def test_under_sequential_seeds_a_degenerate_claim_is_not_tested_and_stays_closed() -> None:
    found = degenerate_outcomes(3.35, 3.351) + outcomes(CLEAR, model="b", method="peri-ln")
    schedule = SeedSchedule(initial=3, max=12, step=3)
    degenerate, clear = findings(
        found,
        [claim(direction="worse"), claim(method="peri-ln", direction="worse")],
        baseline="pre-ln",
        metric="val_loss",
        trivial=TRIVIAL,
        schedule=schedule,
    )
    (check,) = degenerate.checks
    assert degenerate.verdict == "not tested" and check.sequential is None
    assert check.p_value is None and check.seeds_needed is None
    assert degenerate_pairs([degenerate, clear]) == {("post-ln", "pre-ln", "gpt", "lm")}
    assert clear.checks[0].decided_by == "sequential"


def test_a_trials_own_trivial_level_counts() -> None:
    found = [
        replace(o, metrics=o.metrics | {"val_loss:trivial": 3.33})
        for o in degenerate_outcomes(3.35, 3.351)
    ]
    (finding,) = verdicts(found, claim(direction="worse"))
    assert finding.verdict == "not tested"


def test_one_method_at_the_trivial_predictor_keeps_its_verdict_with_a_note() -> None:
    found = degenerate_outcomes(2.0, 3.34)  # post-ln does not train, pre-ln does
    (finding,) = findings(
        found, [claim(direction="worse")], baseline="pre-ln", metric="val_loss", trivial=TRIVIAL
    )
    (check,) = finding.checks
    assert finding.verdict == "reproduced" and check.at_trivial == (5, 0)
    assert check.annotation == "post-ln stays at the trivial predictor on 5 of 5 seeds"


def test_degenerate_checks_leave_the_holm_family() -> None:
    found = degenerate_outcomes(3.35, 3.351) + outcomes(CLEAR, model="b", method="peri-ln")
    degenerate, clear = claim(direction="worse"), claim(method="peri-ln", direction="worse")
    alone = findings(found, [clear], baseline="pre-ln", metric="val_loss", trivial=TRIVIAL)
    both = findings(
        found, [degenerate, clear], baseline="pre-ln", metric="val_loss", trivial=TRIVIAL
    )
    assert both[1].checks[0].p_value == pytest.approx(alone[0].checks[0].p_value)


def test_a_tie_needs_the_interval_inside_the_margin() -> None:
    small = [0.001, -0.002, 0.0, 0.002, -0.001]
    (tie,) = verdicts(outcomes(small), claim(direction="tie", margin=0.05))
    assert tie.verdict == "reproduced" and tie.checks[0].decided_by == "interval"
    assert tie.checks[0].ci_low >= -0.05 and tie.checks[0].ci_high <= 0.05
    assert tie.checks[0].ci_level == pytest.approx(0.90)  # Schuirmann: TOST at 0.05 per side
    (apart,) = verdicts(outcomes(CLEAR), claim(direction="tie", margin=0.05))
    assert apart.verdict == "contradicted"
    (wide,) = verdicts(outcomes(NOISY), claim(direction="tie", margin=0.05))
    assert wide.verdict == "inconclusive"
    assert wide.checks[0].p_value is None


def test_more_diverged_seeds_lose_without_a_test() -> None:
    (found,) = verdicts(outcomes([None, None, 0.0, 0.01, -0.01]), claim(direction="worse"))
    (check,) = found.checks
    assert found.verdict == "reproduced" and check.decided_by == "failures"
    assert check.failed == (2, 0) and check.n == 3


@pytest.mark.parametrize("status", ["timeout", "failed"])
def test_a_crash_or_timeout_is_excluded_never_a_loss(status: str) -> None:
    found = [
        replace(o, status=status, metrics={}) if o.method == "post-ln" and o.seed < 2 else o
        for o in outcomes(CLEAR)
    ]
    (finding,) = verdicts(found, claim(direction="worse"))
    (check,) = finding.checks
    assert check.failed == (0, 0) and check.decided_by == "test"
    assert check.n == 3 and check.excluded == 2
    assert "2 seeds excluded (crashed or timed out)" in check.annotation
    (reversed_claim,) = verdicts(found, claim(direction="better"))
    assert reversed_claim.verdict == "contradicted"  # decided on the 3 finished seeds


def test_significant_in_opposite_directions_between_recipes_is_flipped() -> None:
    found = outcomes(CLEAR, model="tied") + outcomes([-x for x in CLEAR], model="untied")
    (flipped,) = verdicts(found, claim(direction="better", recipes=["untied", "tied"]))
    assert [c.model for c in flipped.checks] == ["untied", "tied"]
    assert [c.verdict for c in flipped.checks] == ["reproduced", "contradicted"]
    assert flipped.verdict == "flipped" and flipped.differs_on == ["tied"]
    assert flipped.verdict_text == "flipped (significant the other way on tied)"
    (steady,) = verdicts(found, claim(direction="better", recipes=["untied"]))
    assert steady.verdict == "reproduced" and not steady.differs_on


def test_decided_in_one_recipe_and_undecided_in_another_is_recipe_dependent() -> None:
    found = outcomes(CLEAR, model="a") + outcomes(NOISY, model="b")
    (found_claim,) = verdicts(found, claim(direction="worse", recipes=["a", "b"]))
    assert [c.verdict for c in found_claim.checks] == ["reproduced", "inconclusive"]
    assert found_claim.verdict == "recipe-dependent" and found_claim.differs_on == ["b"]


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


def store_claims_suite(
    directory: Path, loss: dict[str, float] | None = None, expect: str = EXPECT
) -> Path:
    """A suite with claims, and fake results: by default post-ln ends 0.1 above pre-ln on 5
    seeds."""
    suite = write_suite(directory, METHODS, extra=expect)
    text = suite.read_text().replace("seeds: [0, 1]", "seeds: [0, 1, 2, 3, 4]")
    suite.write_text(text.replace("suite: tiny", "suite: claims"))
    database = make_engine(os.environ["LAYERBENCH_DB"])
    upgrade(database)
    loss = loss or {"pre-ln": 1.5, "post-ln": 1.6}
    trials = plan_suite(load_suite(suite))
    rng = np.random.default_rng(0)
    store(database, [(t, fake_result("done", loss[t.method] + 0.01 * t.seed, rng)) for t in trials])
    return suite


def test_rank_adds_a_findings_block(tmp_path: Path) -> None:
    suite = store_claims_suite(tmp_path)
    ranked = invoke("rank", str(suite), "--format", "json")
    assert ranked.exit_code == 0, ranked.output
    worse, better = json.loads(ranked.stdout)["findings"]
    assert (worse["verdict"], better["verdict"]) == ("reproduced", "contradicted")
    assert worse["checks"][0]["delta"] == pytest.approx(0.1, abs=0.03)
    assert worse["claim"] == "post-ln worse than pre-ln on val_loss"
    table = invoke("rank", str(suite))
    assert table.exit_code == 0 and "Findings" in table.output and "contradicted" in table.output
    markdown = invoke("rank", str(suite), "--format", "md").output
    assert "### Findings" in markdown and "| arXiv:2002.04745, Fig. 3 |" in markdown


DEGENERATE_TEXT = "not tested (degenerate: both stay at the trivial predictor)"
UNTRAINED = {"pre-ln": 3.40, "post-ln": 3.41}
"""Both above the byte-level unigram loss of Shakespeare's train split (3.33 nats on val)."""


def test_rank_says_not_tested_when_both_methods_stay_at_the_trivial_predictor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite = store_claims_suite(tmp_path, UNTRAINED)
    ranked = invoke("rank", str(suite), "--format", "json")
    assert ranked.exit_code == 0, ranked.output
    for finding in json.loads(ranked.stdout)["findings"]:
        assert finding["verdict"] == "not tested" and finding["verdict_text"] == DEGENERATE_TEXT
        (check,) = finding["checks"]
        assert check["p_value"] is None and check["seeds_needed"] is None
        assert check["trivial"] == pytest.approx(3.33, abs=0.01)
        assert check["at_trivial"] == [5, 5]
    monkeypatch.setenv("COLUMNS", "400")
    table = invoke("rank", str(suite))
    assert table.exit_code == 0 and DEGENERATE_TEXT in " ".join(table.output.split())
    markdown = invoke("rank", str(suite), "--format", "md").output
    assert f"| {DEGENERATE_TEXT} |" in markdown and "reproduced" not in markdown


def test_one_method_at_the_trivial_predictor_keeps_the_verdict_annotated(tmp_path: Path) -> None:
    suite = store_claims_suite(tmp_path, {"pre-ln": 1.5, "post-ln": 3.41})
    ranked = invoke("rank", str(suite), "--format", "json")
    worse, better = json.loads(ranked.stdout)["findings"]
    assert (worse["verdict"], better["verdict"]) == ("reproduced", "contradicted")
    note = "post-ln stays at the trivial predictor on 5 of 5 seeds"
    assert worse["checks"][0]["annotation"] == note
    markdown = invoke("rank", str(suite), "--format", "md").output
    assert f"reproduced (an arm does not train); {note}" in markdown


def record_claims(suite: Path) -> None:
    """Record the suite's ranking (with its claims) on its stored run, as `layerbench run` does."""
    ranking = RankingDeclaration.of_suite(load_suite(suite))
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


def test_the_findings_page_says_not_tested_for_a_degenerate_claim(tmp_path: Path) -> None:
    record_claims(store_claims_suite(tmp_path, UNTRAINED))
    at = AppTest.from_file(str(ROOT / "leaderboard" / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("views/findings.py").run()
    assert not at.exception, [e.message for e in at.exception]
    frame = at.dataframe[0].value
    assert list(frame["verdict"]) == ["not tested (degenerate)"] * 2
    assert list(at.expander[0].dataframe[0].value["verdict"]) == [DEGENERATE_TEXT] * 2
    details = at.expander[0].dataframe[0].value  # the p-values are in the Details expander
    assert all(pd.isna(p) or p == "\u2013" for p in details["p (Holm)"])


def test_report_writes_markdown_and_non_trivial_figures(tmp_path: Path) -> None:
    if chromium_path() is None:
        pytest.skip("Debian's chromium is not installed (`make chromium` installs it)")
    suite = store_claims_suite(tmp_path)
    out = tmp_path / "report"
    done = invoke("report", str(suite), "--out", str(out))
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
    other = invoke("report", str(suite), "--out", str(out), "--metric", "train_loss")
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
    done = invoke("report", str(suite), "--out", str(tmp_path / "out"))
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
    done = invoke("report", str(suite), "--out", str(out))
    assert done.exit_code == 0, done.output
    assert calls[1] == 1 and len(calls) == 2  # only the dropped figure was drawn again

    monkeypatch.setattr(pio, "write_images", lambda *a, **k: None)  # never draws anything
    done = invoke("report", str(suite), "--out", str(out))
    assert done.exit_code == 2 and "kaleido drew no image for" in done.output
    assert not list((out / "figures").glob("*.png"))  # the older report's images are gone


def test_report_without_results_is_one_clear_error(tmp_path: Path) -> None:
    suite = claims_suite(tmp_path, "  - {method: post-ln, direction: worse, source: x}\n")
    done = invoke("report", str(suite), "--out", str(tmp_path / "out"))
    assert done.exit_code == 2
    assert "no stored results for suite 'tiny'" in done.output and "Traceback" not in done.output


def test_ranking_reads_its_metrics_and_the_claims_with_their_trivial_levels() -> None:
    spec = RankSpec(tune_metric="train_loss", target=TargetSpec(metric="val_acc", value=0.5))
    claim = Claim(method="a", metric="bits_per_byte", direction="better", source="x")
    plain = RankPlan("s", [], "base", spec)
    assert ranked_metrics(plain, spec) == {"val_loss", "train_loss", "val_acc"}
    claimed = replace(plain, claims=(claim,))
    assert ranked_metrics(claimed, spec) == {
        "val_loss",
        "train_loss",
        "val_acc",
        "bits_per_byte",
        trivial_name("bits_per_byte"),
    }
    sequential = replace(plain, schedule=SeedSchedule(initial=3, max=6))  # implicit claims
    assert trivial_name("val_loss") in ranked_metrics(sequential, spec)
