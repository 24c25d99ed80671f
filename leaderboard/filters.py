"""What the sidebar selects, and which stored outcomes a selection keeps (no Streamlit here)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from harness.ranking import TrialOutcome
from harness.registry import FAMILY_TABLE, METRICS
from harness.utils import flatten

DEFAULT_METRIC = "val_loss"
BASELINE_FAMILY = "baseline"
SECTION_FAMILIES = dict(
    sorted(
        {f.section: f.board for f in FAMILY_TABLE if f.section and f.board}.items(),
        key=lambda item: -len(item[0]),
    )
)
"""The config sections that say what a method is, and the family each one names (the family
table's `board`), the longest first: `optimizer.layerwise` is "layerwise", the rest of
`optimizer` is "optimizer"."""
OTHER_FAMILY = "training"
# Parts of a trial's config that vary by cell or seed, not by method.
CELL_FIELDS = {"model", "task", "seed", "plugins"}


@dataclass(frozen=True)
class Selection:
    """The sidebar's choices; empty `tasks`, `models` or `families` select nothing."""

    suite: str
    run_id: int | None
    tasks: tuple[str, ...]
    models: tuple[str, ...]
    metric: str
    families: tuple[str, ...]
    baseline: str | None
    alpha: float = 0.05


def method_families(
    configs: Mapping[str, Mapping[str, Any]], reference: str
) -> dict[str, tuple[str, ...]]:
    """Each method's families: the config sections where it differs from `reference`.

    `reference` (the baseline) is in the family "baseline"; a method that changes the norm is
    "normalization", one that changes the optimizer's layerwise wrapper is "layerwise", and so on.
    """
    base = _method_fields(configs.get(reference, {}))
    families = {}
    for method, config in configs.items():
        fields = _method_fields(config)
        changed = {
            path for path in fields.keys() | base.keys() if fields.get(path) != base.get(path)
        }
        families[method] = tuple(sorted({_family(path) for path in changed})) or (BASELINE_FAMILY,)
    return families


def _method_fields(config: Mapping[str, Any]) -> dict[str, str]:
    return flatten({k: v for k, v in config.items() if k not in CELL_FIELDS})


def _family(path: str) -> str:
    for prefix, family in SECTION_FAMILIES.items():
        if path == prefix or path.startswith(prefix + "."):
            return family
    return OTHER_FAMILY


def rankable_metrics(stored: Iterable[str]) -> list[str]:
    """The stored metrics the ranking knows the direction of (the default one if none is)."""
    known = [name for name in stored if name in METRICS]
    return known or [DEFAULT_METRIC]


def default_metric(metrics: list[str]) -> str:
    return DEFAULT_METRIC if DEFAULT_METRIC in metrics else metrics[0]


def select(
    outcomes: Iterable[TrialOutcome],
    selection: Selection,
    run_of: Mapping[str, int | None],
    families: Mapping[str, tuple[str, ...]],
    nightly: Collection[int] = (),
) -> list[TrialOutcome]:
    """The outcomes of the selected run, tasks, models and method families (and the baseline).

    No run selected means every result of `layerbench run`: the trials of the `nightly` runs
    (each night re-runs the suite) are only seen one run at a time."""
    wanted = set(selection.families)
    return [
        outcome
        for outcome in outcomes
        if (
            run_of.get(outcome.key) == selection.run_id
            if selection.run_id is not None
            else run_of.get(outcome.key) not in nightly
        )
        and outcome.task in selection.tasks
        and outcome.model in selection.models
        and (outcome.method == selection.baseline or wanted & set(families.get(outcome.method, ())))
    ]
