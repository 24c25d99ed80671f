"""Why planned trials have no stored result, and which stored trials are no longer current.

A trial's key holds its config, the versions that can change its numbers and its data
fingerprint (`harness.spec.plan`), so a planned trial finds no stored result when it was never
run, when its task's data or model is not installed here (the fingerprint differs: e.g. the
BIG-bench tasks before `layerbench data install bigbench`), or when a version changed since it
ran (an entry's `version`, a method library, torch...): the stored trial of the same config is
then *superseded*. `rank`, `report` and the leaderboard state these counts under their tables
(`unstored_notes`), and `layerbench status` lists the superseded stored trials (`stale_trials`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from harness.cache import DataMissingError
from harness.env import RESULT_CHANGING_PACKAGES, package_versions
from harness.records import ACTIVE_STATUSES, FINAL_STATUSES, PlannedTrial
from harness.spec.plan import key_of, trial_versions
from harness.spec.recipe import TrialRecipe, stored_recipe
from harness.store.models import Trial
from harness.store.queries import CHUNK, trial_statuses
from harness.utils import chunks

NOT_PLANNABLE = (DataMissingError, ValidationError, ValueError, KeyError, TypeError)
"""What recomputing a parsed stored trial's key may raise here (a corpus not installed): such a
trial is left out of `stale_trials`, as one whose config does not parse here (`stored_recipe`)."""


def not_installed(recipe: TrialRecipe) -> str | None:
    """The reason a trial of this recipe cannot find its stored result here: its task's data
    or its model is not installed (with the command that installs it), else None."""
    sections = (
        (recipe.task_entry, recipe.task, "task data"),
        (recipe.model_entry, recipe.model, "model"),
    )
    for entry, params, what in sections:
        command = entry.missing(params) if entry.missing else None
        if command:
            return f"whose {what} is not installed here (run `{command}`)"
    return None


def version_changes(environment: dict[str, Any] | None, recipe: TrialRecipe) -> list[str]:
    """What changed between the versions a stored trial ran with (its `environment`) and those a
    trial of its recipe would run with now: packages, method libraries, entries."""
    environment = environment or {}
    now = package_versions()
    changes = [
        f"{name} {environment[f'{name}_version']} -> {now[name]}"
        for name in RESULT_CHANGING_PACKAGES
        if environment.get(f"{name}_version", now[name]) != now[name]
    ]
    before = environment.get("method_versions") or {}
    after = trial_versions(recipe)
    for name in sorted(set(before) | set(after)):
        if name not in ("libraries", "plugins") and before.get(name, 1) != after.get(name, 1):
            changes.append(f"{name} version {before.get(name, 1)} -> {after.get(name, 1)}")
    libraries_before, libraries_after = before.get("libraries", {}), after.get("libraries", {})
    for name in sorted(set(libraries_before) | set(libraries_after)):
        old, new = libraries_before.get(name, "baseline"), libraries_after.get(name, "baseline")
        if old != new:
            changes.append(f"{name} {old} -> {new}")
    plugins_before, plugins_after = before.get("plugins", {}), after.get("plugins", {})
    for name in sorted(set(plugins_before) | set(plugins_after)):
        old, new = plugins_before.get(name, "none"), plugins_after.get(name, "none")
        if old != new:
            changes.append(f"plugin {name} source {old[:12]} -> {new[:12]}")
    return changes


def superseded_reason(environment: dict[str, Any] | None, recipe: TrialRecipe) -> str:
    """Why a stored trial of this recipe no longer has the current key."""
    missing = not_installed(recipe)
    if missing:
        return missing
    changes = version_changes(environment, recipe)
    if changes:
        return "superseded by a version change (" + ", ".join(changes) + ")"
    return "superseded: the task's data changed"


def identity_of(trial: PlannedTrial | Any) -> tuple[Any, ...]:
    """Who a trial is, whatever its key: its cell, seed and config."""
    config = json.dumps(trial.config, sort_keys=True, default=str)
    return (trial.method, trial.model, trial.task, trial.seed, config)


def stored_by_identity(engine: Engine, suite: str, methods: set[str]) -> dict[tuple[Any, ...], Any]:
    """The suite's stored finished trials of these methods, by `identity_of`."""
    query = select(
        Trial.key,
        Trial.method,
        Trial.model,
        Trial.task,
        Trial.seed,
        Trial.config,
        Trial.environment,
    ).where(Trial.suite == suite, Trial.status.in_(FINAL_STATUSES))
    found = {}
    with Session(engine) as session:
        for chunk in chunks(sorted(methods), CHUNK):
            for row in session.execute(query.where(Trial.method.in_(chunk))):
                found[identity_of(row)] = row
    return found


def missing_reason(trial: PlannedTrial, status: str | None, stored: dict[Any, Any]) -> str:
    """Why a planned trial has no stored result."""
    missing = not_installed(trial.recipe)
    if missing:
        return missing
    old = stored.get(identity_of(trial))
    if old is not None:
        return superseded_reason(old.environment, trial.recipe)
    if status in ACTIVE_STATUSES:
        return "running or interrupted (`layerbench run` resumes them)"
    return "not run yet (`layerbench run` runs them)"


def unstored_notes(engine: Engine, trials: list[PlannedTrial]) -> list[str]:
    """The line saying how many planned trials have no stored result and why, by reason."""
    statuses = trial_statuses(engine, [trial.key for trial in trials])
    absent = [t for t in trials if statuses.get(t.key) not in FINAL_STATUSES]
    if not absent:
        return []
    stored = stored_by_identity(engine, absent[0].suite, {t.method for t in absent})
    reasons = Counter(missing_reason(t, statuses.get(t.key), stored) for t in absent)
    why = "; ".join(f"{count} {reason}" for reason, count in reasons.most_common())
    return [f"{len(absent)} of {len(trials)} planned trials have no stored result: {why}"]


def stale_trials(engine: Engine) -> Iterator[tuple[str, str]]:
    """(suite, reason) of each stored finished trial whose key is not the one a trial of its
    config gets here now (superseded by a version change, or its data not installed)."""
    query = select(
        Trial.key,
        Trial.suite,
        Trial.method,
        Trial.model,
        Trial.task,
        Trial.config,
        Trial.environment,
    ).where(Trial.status.in_(FINAL_STATUSES))
    fingerprints: dict[str, str] = {}
    with Session(engine) as session:
        for row in session.execute(query):
            reason = stale_reason(row, fingerprints)
            if reason:
                yield row.suite, reason


def stale_reason(row: Any, fingerprints: dict[str, str]) -> str | None:
    """Why a stored trial is not current here, or None when it is (or cannot be planned here)."""
    identity = {"suite": row.suite, "method": row.method, "model": row.model, "task": row.task}
    recipe = stored_recipe(row.config)
    if recipe is None:
        return None
    try:
        task = recipe.task.model_dump_json()
        if task not in fingerprints:
            fingerprints[task] = recipe.fingerprint()
        versions = trial_versions(recipe)
        if (
            key_of(identity, row.config, fingerprints[task], package_versions(), versions)
            == row.key
        ):
            return None
        return superseded_reason(row.environment, recipe)
    except NOT_PLANNABLE:
        return None


def stale_counts(rows: Iterable[tuple[str, str]]) -> list[tuple[str, str, int]]:
    """(suite, reason, count), sorted."""
    return sorted((suite, reason, n) for (suite, reason), n in Counter(rows).items())
