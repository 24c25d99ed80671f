"""Streamlit glue: the read-only engine, cached reads and rankings, the sidebar's selection."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pandas as pd
import streamlit as st
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from harness.ranking import Ranking, TrialOutcome
from harness.ranking.suite import Baseline, RankOverrides, rank_suite
from harness.spec.declaration import RankingDeclaration
from harness.store.db import DatabaseError, redact
from leaderboard import data
from leaderboard.filters import (
    Selection,
    default_metric,
    method_families,
    rankable_metrics,
    select,
)

CONTEXT_KEY = "layerbench_context"
ALPHAS = [0.01, 0.05, 0.1]
NO_BASELINE = "(none)"


@dataclass(frozen=True)
class SuiteData:
    """What the database holds about one suite, read once per change of its trials."""

    outcomes: list[TrialOutcome]
    run_of: dict[str, int | None]
    runs: list[data.RunInfo]
    configs: dict[str, dict[str, Any]]
    metrics: list[str]

    @property
    def methods(self) -> list[str]:
        """Methods in the order first stored (the suite's order)."""
        return list(self.configs)

    @property
    def nightly(self) -> frozenset[int]:
        """The ids of the suite's nightly runs."""
        return frozenset(run.id for run in self.runs if run.kind == "nightly")


@dataclass(frozen=True)
class Context:
    """The database and the sidebar's selection, shared by every page."""

    url: str
    version: tuple[Any, ...]
    selection: Selection

    @property
    def engine(self) -> Engine:
        return engine(self.url)

    @property
    def suite(self) -> SuiteData:
        return suite_data(self.url, self.selection.suite, self.version)


@dataclass(frozen=True)
class Board:
    """The ranking of a selection, with the trials it ranked (one per seed) and their families."""

    ranking: Ranking
    tuned: list[TrialOutcome]
    families: dict[str, tuple[str, ...]]


@st.cache_resource(show_spinner=False)
def engine(url: str) -> Engine:
    return data.read_only_engine(url)


# Cached as resources, not data: shared read-only objects, never copied (pickled) on a hit.
@st.cache_resource(max_entries=8, show_spinner=False)
def suite_data(url: str, suite: str, version: tuple[Any, ...]) -> SuiteData:
    db = engine(url)
    return SuiteData(
        outcomes=data.outcomes(db, suite),
        run_of=data.run_of_trials(db, suite),
        runs=data.suite_runs(db, suite),
        configs=data.method_configs(db, suite),
        metrics=data.metric_names(db, suite),
    )


def families(suite: SuiteData, baseline: str | None) -> dict[str, tuple[str, ...]]:
    """Method families relative to the baseline (or to the suite's first method)."""
    reference = baseline or (suite.methods[0] if suite.methods else "")
    return method_families(suite.configs, reference)


@st.cache_resource(max_entries=64, show_spinner=False)
def board(context: Context) -> Board | None:
    """The ranking of the selected outcomes (`harness.ranking.suite.rank_suite`, as the CLI
    ranks): the suite's current trials, or with a suite run selected the trials that run ran;
    None when the selection keeps none."""
    selection, suite = context.selection, context.suite
    method_families = families(suite, selection.baseline)
    chosen = select(suite.outcomes, selection, suite.run_of, method_families, suite.nightly)
    keys = {outcome.key for outcome in chosen}
    overrides = RankOverrides(
        metric=selection.metric,
        baseline=Baseline(selection.baseline),
        alpha=selection.alpha,
        keep=lambda outcome: outcome.key in keys,
        current_only=selection.run_id is None,
        nightly=False,  # a nightly run is chosen as a suite run in the sidebar
    )
    ranking = rank_suite(context.engine, selection.suite, overrides)
    if ranking is None:
        return None
    ranked = {trial["key"] for row in ranking.rows for trial in row.trials}
    tuned = [o for o in suite.outcomes if o.key in ranked]
    return Board(ranking, tuned, method_families)


def selected_trials(context: Context) -> pd.DataFrame:
    """Stored trials of the sidebar's selection (every sweep point), in the order run."""
    suite, selection = context.suite, context.selection
    method_families = families(suite, selection.baseline)
    chosen = select(suite.outcomes, selection, suite.run_of, method_families, suite.nightly)
    listing = data.trials(context.engine, selection.suite)
    return listing[listing["key"].isin({o.key for o in chosen})].reset_index(drop=True)


def run_boards(context: Context, kind: str | None = None) -> list[tuple[data.RunInfo, Board]]:
    """The selection ranked separately on each suite run's trials (of `kind` if given), oldest
    run first."""
    boards = []
    for run in context.suite.runs:
        if kind is not None and run.kind != kind:
            continue
        run_context = replace(context, selection=replace(context.selection, run_id=run.id))
        ranked = board(run_context)
        if ranked is not None:
            boards.append((run, ranked))
    return boards


def sidebar(url: str) -> Context | None:
    """The filters; None (after saying why) when there is nothing to show."""
    try:
        db = engine(url)
        suites = data.suites(db) if data.has_trials_table(db) else []
    except (DatabaseError, OperationalError) as error:
        st.error(f"Cannot read the results database {redact(url)}: {_reason(error)}")
        return None
    if not suites:
        st.info(
            f"No results in {redact(url)} yet. Run a suite with "
            "`layerbench run SUITE --db URL`, then reload this page."
        )
        return None
    linked = st.query_params.get("suite")  # a link from the Findings page
    first = suites.index(linked) if linked in suites else 0
    suite = st.sidebar.selectbox("Suite", suites, index=first, key="suite")
    version = data.version(db, suite)
    selection = _selection(suite, suite_data(url, suite, version))
    context = Context(url, version, selection)
    st.session_state[CONTEXT_KEY] = context
    return context


def _selection(suite: str, stored: SuiteData) -> Selection:
    bar = st.sidebar
    runs = {run.id: run.label for run in reversed(stored.runs)}
    nightly = [run_id for run_id in runs if run_id in stored.nightly]
    everything = "all results of `layerbench run`" if nightly else "all stored results"
    run_id = bar.selectbox(
        "Suite run",
        [None, *runs],
        index=1 + list(runs).index(nightly[0]) if nightly else 0,  # the latest nightly run
        format_func=lambda r: everything if r is None else runs[r],
        key=f"run:{suite}",
    )
    tasks = sorted({o.task for o in stored.outcomes})
    models = sorted({o.model for o in stored.outcomes})
    metrics = rankable_metrics(stored.metrics)
    chosen_tasks = bar.multiselect("Tasks", tasks, default=tasks, key=f"tasks:{suite}")
    chosen_models = bar.multiselect("Models", models, default=models, key=f"models:{suite}")
    declared = last_declaration(stored)
    metric = declared.rank.metric if declared and declared.rank.metric in metrics else None
    metric = bar.selectbox(
        "Metric",
        metrics,
        index=metrics.index(metric or default_metric(metrics)),
        key=f"metric:{suite}",
    )
    baselines = [*stored.methods, NO_BASELINE]
    baseline = bar.selectbox(
        "Baseline",
        baselines,
        index=baseline_index(declared, baselines),
        key=f"baseline:{suite}",
        help="The default is the baseline the suite declared in its last run.",
    )
    baseline = None if baseline == NO_BASELINE else baseline
    names = sorted({f for fs in families(stored, baseline).values() for f in fs})
    chosen_families = bar.multiselect(
        "Method families", names, default=names, key=f"families:{suite}:{baseline}"
    )
    alpha = declared.rank.alpha if declared and declared.rank.alpha in ALPHAS else 0.05
    alpha = bar.select_slider("Significance level (alpha)", ALPHAS, value=alpha, key="alpha")
    return Selection(
        suite,
        run_id,
        tuple(chosen_tasks),
        tuple(chosen_models),
        metric,
        tuple(chosen_families),
        baseline,
        alpha,
    )


def last_declaration(stored: SuiteData) -> RankingDeclaration | None:
    """How the suite's last run said to rank it (older databases did not record it)."""
    return stored.runs[-1].ranking if stored.runs else None


def baseline_index(declared: RankingDeclaration | None, baselines: list[str]) -> int:
    """The declared baseline, "none" if the suite declared none, the first method if unknown."""
    if declared is None:
        return 0
    return baselines.index(declared.baseline if declared.baseline in baselines else NO_BASELINE)


def current() -> Context:
    """The context the entry script stored for this run (pages run after it)."""
    return st.session_state[CONTEXT_KEY]


def _reason(error: Exception) -> str:
    """The first line of the database's own message."""
    cause = getattr(error, "orig", None) or error
    return str(cause).strip().splitlines()[0]
