"""The Findings page's table: one row per `expect` claim of every suite that states claims, with
its verdict from `harness.ranking.findings` (the verdicts `layerbench rank` prints)."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlencode

import pandas as pd

from harness.ranking.findings import Finding, RecipeCheck
from harness.ranking.sequential import describe, verdict_note

COMPARE_PAGE = "compare"
COLUMNS = [
    "family",
    "paper",
    "claim",
    "expected",
    "observed Δ ± 95% CI",
    "p (Holm)",
    "median Δ, sign test",
    "verdict",
    "seeds needed",
    "notes",
    "seeds used",
    "compare",
]
FAMILY_PREFIX = "findings-"


def family(suite: str) -> str:
    """A claim family's name: the suite's, without the `findings-` prefix."""
    return suite.removeprefix(FAMILY_PREFIX)


def expected(finding: Finding) -> str:
    if finding.direction == "tie":
        return f"tie within ±{finding.margin:g} {finding.metric}"
    return f"{finding.method} {finding.direction} than {finding.than} on {finding.metric}"


def observed(check: RecipeCheck, several: bool) -> str:
    """`recipe: Δ [low, high] verdict`, the recipe named when the claim has several."""
    lead = f"{check.model}: " if several else ""
    if check.delta is None:
        return f"{lead}no paired seeds"
    interval = (
        f" [{check.ci_low:+.3g}, {check.ci_high:+.3g}]"
        if check.ci_low is not None and check.ci_high is not None
        else ""
    )
    failures = (
        f", {check.failed[0]} vs {check.failed[1]} diverged seeds" if any(check.failed) else ""
    )
    note = verdict_note(check.sequential)
    suffix = f" ({check.verdict_text}{failures})" if several else failures
    suffix += f" ({note})" if note else ""
    return f"{lead}{check.delta:+.3g}{interval}{suffix}"


def seeds_used(finding: Finding, several: bool) -> str:
    """Under sequential seeds, each recipe's n, looks, how it stopped and its CPU seconds."""
    return "; ".join(
        (f"{c.model}: " if several else "") + describe(c.sequential)
        for c in finding.checks
        if c.sequential is not None
    )


def verdict(finding: Finding) -> str:
    return finding.verdict_text


def recipe_lead(check: RecipeCheck, several: bool) -> str:
    return f"{check.model}: " if several else ""


def holm_p(check: RecipeCheck, several: bool) -> str | None:
    if check.p_value is None:
        return None
    return f"{recipe_lead(check, several)}{check.p_value:.3g}"


def secondary(check: RecipeCheck, several: bool) -> str | None:
    """The median paired difference and the exact sign test (one catastrophic seed shows)."""
    if check.median_delta is None:
        return None
    sign = "" if check.sign_p is None else f", sign p {check.sign_p:.3g}"
    counts = f" ({check.signs[0]}+/{check.signs[1]}-)"
    return f"{recipe_lead(check, several)}{check.median_delta:+.3g}{sign}{counts}"


def notes(check: RecipeCheck, several: bool) -> str | None:
    """Trivial-predictor annotations, excluded seeds, why no seeds are needed."""
    found = [text for text in (check.annotation, check.needed_note) if text]
    return f"{recipe_lead(check, several)}{'; '.join(found)}" if found else None


def joined(values: Iterable[str | None]) -> str:
    return "; ".join(value for value in values if value)


def compare_link(suite: str, finding: Finding) -> str | None:
    """The Compare view of the claim's first recipe, with its two methods selected."""
    if not finding.checks:
        return None
    check = finding.checks[0]
    query = {
        "suite": suite,
        "task": check.task,
        "model": check.model,
        "methods": f"{finding.method},{finding.than}",
    }
    return f"{COMPARE_PAGE}?{urlencode(query)}"


def findings_frame(by_suite: Iterable[tuple[str, list[Finding]]]) -> pd.DataFrame:
    """One row per claim (see `COLUMNS`), suites in the order given."""
    records = []
    for suite, findings in by_suite:
        for finding in findings:
            several = len(finding.checks) > 1
            needed = [
                f"{c.model}: {c.seeds_needed}" if several else str(c.seeds_needed)
                for c in finding.checks
                if c.seeds_needed is not None
            ]
            records.append(
                [
                    family(suite),
                    finding.source,
                    finding.claim,
                    expected(finding),
                    "; ".join(observed(c, several) for c in finding.checks) or "no results",
                    joined(holm_p(c, several) for c in finding.checks),
                    joined(secondary(c, several) for c in finding.checks),
                    verdict(finding),
                    ", ".join(needed),
                    joined(notes(c, several) for c in finding.checks),
                    seeds_used(finding, several),
                    compare_link(suite, finding),
                ]
            )
    return pd.DataFrame.from_records(records, columns=COLUMNS)
