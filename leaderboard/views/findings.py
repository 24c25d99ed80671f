"""Findings page: the published claims the suites state (`expect`), and whether the stored
results reproduce them. Read-only, like every page; the verdicts are `layerbench rank`'s."""

from __future__ import annotations

from typing import Any

import streamlit as st

from harness.ranking.findings import Finding
from harness.ranking.suite import rank_suite
from leaderboard import data
from leaderboard.findings import family, findings_frame
from leaderboard.state import Context, current, engine

RULE = (
    "Per claim and recipe (model variant): the paired difference method - than over the seeds "
    "both finished, its 95% t-interval and a paired t-test, Holm-adjusted over the suite's "
    "directional claims. Reproduced: significant in the expected direction (a tie: the interval "
    "inside ±margin); contradicted: significant the other way (a tie: the interval outside); "
    "else inconclusive, with the seeds a test would need for 80% power. Fragile: the verdict "
    "differs between recipes. Suites with sequential seeds (`seeds: {initial, max, step}`) use "
    "anytime-valid confidence sequences instead, valid however many looks the run took "
    "(Lai, 1976; Wang & Ramdas, 2023; docs/sequential.md): 'seeds used' says how many seeds "
    "each check took, over how many looks, how it stopped (decided, futile, at max) and its "
    "CPU seconds."
)


@st.cache_resource(max_entries=32, show_spinner=False)
def suite_findings(url: str, suite: str, version: tuple[Any, ...]) -> list[Finding]:
    """The verdicts of the suite's claims as its latest run declared them."""
    ranking = rank_suite(engine(url), suite)
    return ranking.findings if ranking is not None else []


def claim_suites(context: Context) -> list[str]:
    """Suites whose latest run declared `expect` claims."""
    db = context.engine
    return [
        suite
        for suite in data.suites(db)
        if (runs := data.suite_runs(db, suite)) and runs[-1].ranking and runs[-1].ranking.expect
    ]


def render(context: Context) -> None:
    st.title("Findings")
    st.caption(RULE)
    suites = claim_suites(context)
    if not suites:
        st.info(
            "No stored suite states claims (`expect:`). Run one of suites/findings/*.yaml with "
            "`layerbench run`, then reload this page."
        )
        return
    families = [family(suite) for suite in suites]
    chosen = st.multiselect("Claim families", families, default=families)
    by_suite = [
        (suite, suite_findings(context.url, suite, data.version(context.engine, suite)))
        for suite in suites
        if family(suite) in chosen
    ]
    st.dataframe(
        findings_frame(by_suite),
        hide_index=True,
        column_config={"compare": st.column_config.LinkColumn(display_text="compare")},
    )


render(current())
