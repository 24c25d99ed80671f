"""The Findings page's table, verdict first: one row per `expect` claim and recipe of the suites
that state claims, with the verdicts of `harness.claims` (those `layerbench rank`
prints). The claim is a short sentence ("mix-ln < pre-ln on val_loss"), then the recipe, the
verdict, the difference with its interval, the seeds, and the paper as its arXiv id (the full
source text is in the page's expander), so that nothing a reader needs is off-screen."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlencode

import pandas as pd

from harness.claims import Finding, RecipeCheck
from harness.claims.sequential import describe
from harness.ranking.table import EMPTY
from harness.registry import METRICS

COMPARE_PAGE = "compare"
COLUMNS = ["suite", "claim", "recipe", "verdict", "Δ [95% CI]", "seeds", "paper"]
"""The recipe cell is a link to the Compare page (its text: the recipe's model)."""
FAMILY_PREFIX = "findings-"
NOT_TESTED = "not tested"
FLIPPED = "flipped"
VERDICT_ORDER = ["reproduced", "contradicted", FLIPPED, "inconclusive", NOT_TESTED]
"""The order of "sort by verdict"; other labels (e.g. recipe-dependent) come after these."""
VERDICT_COLOURS = {
    "reproduced": "#1e8e3e",
    "contradicted": "#d93025",
    "inconclusive": "#b06000",
    FLIPPED: "#8e24aa",
    "recipe-dep": "#8e24aa",
    "fragile": "#8e24aa",
    "not": "#5f6368",  # not tested, with or without a reason
}
ARXIV = re.compile(r"(?:arXiv:\s*|arxiv\.org/(?:abs|pdf)/)(\d{4}\.\d{4,5})", re.IGNORECASE)
RECIPE_TEXT = r"model=(.*)$"
"""The recipe link's text: its model (`compare_link`), URL-encoded as model names never need."""
SHORT_LABELS = {"recipe-dependent": "recipe-dep."}
"""Claim labels shortened in the verdict cell (the Details expander has the full verdict)."""
SYMBOLS = {("better", "min"): "<", ("better", "max"): ">", ("worse", "min"): ">"}
SYMBOLS |= {("worse", "max"): "<"}


def family(suite: str) -> str:
    """A claim family's name: the suite's, without the `findings-` prefix."""
    return suite.removeprefix(FAMILY_PREFIX)


def short_claim(finding: Finding) -> str:
    """The claim as a short sentence: "mix-ln < pre-ln on val_loss" (< is lower: the metric's
    better side decides the sign), "rms ≈ layer (±0.02) on val_loss" for a tie."""
    if finding.direction == "tie":
        relation = f"≈ (±{finding.margin:g})" if finding.margin is not None else "≈"
    else:
        relation = SYMBOLS[(finding.direction, METRICS.get(finding.metric).direction)]
    return f"{finding.method} {relation} {finding.than} on {finding.metric}"


def arxiv_link(source: str) -> str | None:
    """https://arxiv.org/abs/ID of the first arXiv id the source names, if any."""
    found = ARXIV.search(source)
    return f"https://arxiv.org/abs/{found.group(1)}" if found else None


def recipe(check: RecipeCheck, several_tasks: bool) -> str:
    """The name `flipped_by` gives a recipe: its model, with the task when there are several."""
    return f"{check.model} on {check.task}" if several_tasks else check.model


def claim_text(finding: Finding, check: RecipeCheck | None, several_tasks: bool) -> str:
    """The short claim, with the task when the claim is checked on several."""
    task = f" ({check.task})" if check is not None and several_tasks else ""
    return short_claim(finding) + task


def verdict_label(finding: Finding, check: RecipeCheck | None, several_tasks: bool) -> str:
    """The recipe's verdict, led by the claim's (flipped, recipe-dependent) on a recipe whose
    verdict differs from the first tested recipe's (`Finding.differs_on`)."""
    if check is None:
        return NOT_TESTED
    if recipe(check, several_tasks) in finding.differs_on:
        lead = SHORT_LABELS.get(finding.verdict, finding.verdict)
        return f"{lead}: {check.verdict}"  # flipped / recipe-dependent
    return check.verdict_text.split(":")[0] + (")" if ":" in check.verdict_text else "")


def difference(check: RecipeCheck | None) -> str:
    """`Δ [low, high]` (method - than), with failed seeds when they decided."""
    if check is None or check.delta is None:
        return EMPTY
    interval = (
        f" [{check.ci_low:+.2g}, {check.ci_high:+.2g}]"
        if check.ci_low is not None and check.ci_high is not None
        else ""
    )
    failures = f"; failed seeds {check.failed[0]} vs {check.failed[1]}" if any(check.failed) else ""
    return f"{check.delta:+.3g}{interval}{failures}"


def seeds(check: RecipeCheck | None) -> str:
    """Seeds used, and the seeds an inconclusive check would need (or, with sequential seeds,
    the looks it took: the Details expander has how it stopped and its CPU seconds)."""
    if check is None:
        return EMPTY
    if check.sequential is not None:
        looks = check.sequential.looks
        return f"{check.n} ({looks} look{'s' if looks != 1 else ''})"
    needed = f" (needs {check.seeds_needed})" if check.seeds_needed is not None else ""
    return f"{check.n}{needed}"


def compare_link(suite: str, finding: Finding, check: RecipeCheck | None) -> str | None:
    """The Compare view of the recipe, with the claim's two methods selected; the model comes
    last, as the table shows it (`RECIPE_TEXT`)."""
    if check is None:
        return None
    query = {
        "suite": suite,
        "task": check.task,
        "methods": f"{finding.method},{finding.than}",
        "model": check.model,
    }
    return f"{COMPARE_PAGE}?{urlencode(query)}"


def verdict_rank(label: str) -> int:
    """Position of a verdict label in VERDICT_ORDER (its first word; unknown ones last)."""
    head = label.split(":")[0].split(" (")[0]
    return VERDICT_ORDER.index(head) if head in VERDICT_ORDER else len(VERDICT_ORDER)


def verdict_colour(label: str) -> str:
    """The label's colour (by its first word: "flipped: reproduced" is a flip)."""
    for word, colour in VERDICT_COLOURS.items():
        if label.startswith(word):
            return colour
    return VERDICT_COLOURS["not"]


def findings_frame(
    by_suite: Iterable[tuple[str, list[Finding]]], by_verdict: bool = False
) -> pd.DataFrame:
    """One row per claim and recipe (see `COLUMNS`), suites and claims in the order given, or
    sorted by verdict (`VERDICT_ORDER`, stable)."""
    records = []
    for suite, findings in by_suite:
        for finding in findings:
            several = len({c.task for c in finding.checks}) > 1
            checks: list[RecipeCheck | None] = list(finding.checks) or [None]
            for check in checks:
                records.append(
                    [
                        family(suite),
                        claim_text(finding, check, several),
                        compare_link(suite, finding, check),
                        verdict_label(finding, check, several),
                        difference(check),
                        seeds(check),
                        arxiv_link(finding.source),
                    ]
                )
    frame = pd.DataFrame.from_records(records, columns=COLUMNS)
    if by_verdict and not frame.empty:
        frame = frame.sort_values("verdict", key=lambda c: c.map(verdict_rank), kind="stable")
    return frame.reset_index(drop=True)


def sources_frame(by_suite: Iterable[tuple[str, list[Finding]]]) -> pd.DataFrame:
    """Each claim's full source text (the paper column's id is its short form)."""
    records = [
        [family(suite), short_claim(finding), finding.source, finding.note]
        for suite, findings in by_suite
        for finding in findings
    ]
    return pd.DataFrame.from_records(records, columns=["suite", "claim", "source", "note"])


def details_frame(by_suite: Iterable[tuple[str, list[Finding]]]) -> pd.DataFrame:
    """One row per check with the statistics the verdict-first table leaves out (the page shows
    them in an expander; new per-check statistics go here, not into the main table)."""
    records = []
    for suite, findings in by_suite:
        for finding in findings:
            several = len({c.task for c in finding.checks}) > 1
            for check in finding.checks:
                records.append(
                    {
                        "suite": family(suite),
                        "claim": claim_text(finding, check, several),
                        "recipe": recipe(check, several),
                        "p (Holm)": check.p_value,
                        "median Δ": check.median_delta,
                        "sign test p": check.sign_p,
                        "notes": "; ".join(filter(None, [check.annotation, check.needed_note]))
                        or None,
                        "decided by": check.decided_by,
                        "failed seeds (method, than)": f"{check.failed[0]}, {check.failed[1]}",
                        "seeds needed": check.seeds_needed,
                        "seeds used (sequential)": describe(check.sequential)
                        if check.sequential is not None
                        else None,
                        "note": check.sequential_note or None,
                        "verdict": check.verdict_text,
                        "claim verdict": finding.verdict_text,
                    }
                )
    return pd.DataFrame.from_records(records)
