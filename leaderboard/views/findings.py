"""Findings page: the published claims the suites state (`expect`), and whether the stored
results reproduce them, verdict first. Read-only, like every page; the verdicts are
`layerbench rank`'s."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from harness.claims import Finding
from harness.ranking.suite import rank_suite
from leaderboard import data
from leaderboard.findings import (
    RECIPE_TEXT,
    details_frame,
    family,
    findings_frame,
    sources_frame,
    verdict_colour,
)
from leaderboard.state import Context, current, engine
from leaderboard.tables import dashed
from leaderboard.text import plain

RULE = (
    "Per claim and recipe (model variant): the paired difference method - than over the seeds "
    "both finished, its 95% t-interval and a paired t-test, Holm-adjusted over the suite's "
    "directional claims. Reproduced: significant in the expected direction (a tie: the interval "
    "inside ±margin); contradicted: significant the other way (a tie: the interval outside); "
    "else inconclusive, with the seeds a test would need for 80% power. Flipped: the recipe's "
    "verdict differs from the claim's first recipe (the paper's). In a claim, < and > compare "
    "the metric's values (lower val_loss is better). Suites with sequential seeds "
    "(`seeds: {initial, max, step}`) use anytime-valid confidence sequences instead, valid "
    "however many looks the run took (Lai, 1976; Wang & Ramdas, 2023; docs/sequential.md): "
    "'Details' says how many seeds each check took, over how many looks, how it stopped "
    "(decided, futile, at max) and its CPU seconds."
)
ALL_SUITES = "All suites"
ROW_PX = 35  # the height of a row of st.dataframe
ORDERS = ["verdict", "suite order"]
COLUMN_CONFIG = {  # pixel widths: the whole table fits 1400 px with the sidebar open
    "suite": st.column_config.TextColumn("suite", width=112),
    "claim": st.column_config.TextColumn("claim", width=262),
    "recipe": st.column_config.LinkColumn(
        "recipe", display_text=RECIPE_TEXT, width=108, help="the model; opens the Compare view"
    ),
    "verdict": st.column_config.TextColumn("verdict", width=180),
    "Δ [95% CI]": st.column_config.TextColumn(
        "Δ [95% CI]", width=195, help="method - than, mean over paired seeds, 95% t-interval"
    ),
    "seeds": st.column_config.TextColumn(
        "seeds", width=95, help="seeds both methods finished (and the seeds 80% power needs)"
    ),
    "paper": st.column_config.LinkColumn(
        "paper",
        display_text=r"https://arxiv\.org/abs/(.*)",
        width=82,
        help="the paper on arXiv; the full source text is in 'Sources' below",
    ),
}


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


def styled(frame: pd.DataFrame) -> Any:
    """The table with each verdict as a coloured label."""
    return frame.style.map(
        lambda label: f"color: white; background-color: {verdict_colour(label)}",
        subset=["verdict"],
    )


def render(context: Context) -> None:
    st.title("Findings")
    suites = claim_suites(context)
    if not suites:
        st.info(
            "No stored suite states claims (`expect:`). Run one of suites/findings/*.yaml with "
            "`layerbench run`, then reload this page."
        )
        return
    views = [ALL_SUITES, *map(family, suites)]
    view = st.radio("Claims of", views, horizontal=True, key="findings_view")
    order = st.radio("Sort by", ORDERS, horizontal=True, key="findings_order")
    by_suite = [
        (suite, suite_findings(context.url, suite, data.version(context.engine, suite)))
        for suite in suites
        if view in (ALL_SUITES, family(suite))
    ]
    frame = findings_frame(by_suite, by_verdict=order == "verdict")
    if view != ALL_SUITES:
        frame = frame.drop(columns="suite")
    st.dataframe(
        styled(frame),
        hide_index=True,
        column_config=COLUMN_CONFIG,
        height=ROW_PX * (len(frame) + 1) + 3,  # every claim shown, no scroll inside the table
    )
    st.caption(RULE)
    with st.expander("Details: each check's test and failures"):
        st.dataframe(dashed(details_frame(by_suite), {"p (Holm)": ".3g"}), hide_index=True)
    with st.expander("Sources: each claim's full source text"):
        for row in sources_frame(by_suite).itertuples():
            note = f" ({plain(row.note)})" if row.note else ""
            st.markdown(f"- **{plain(row.suite)}**, {plain(row.claim)}: {plain(row.source)}{note}")


render(current())
