"""Suite -> trials. A trial is (method after sweep expansion, model, task, seed).

Its key is the SHA-256 of the canonical resolved config, the versions that change results
and the task's data fingerprint, so an unchanged trial is never run twice.

The versions are those of the packages every trial depends on (`package_versions`: layerbench,
torch, transformers, lm-eval) and, since entries have versions, those of the entries the trial
uses and of the method libraries that implement them (`trial_versions`). These two enter the key
only where they differ from their initial values (entry version 1, the method libraries' baseline
`METHOD_LIBRARIES`), so the key of a trial that uses none of them changed is the key computed
before entries had versions: the stored results (docs/results/data/) keep matching their suites,
while bumping an entry or upgrading a method library changes the keys of exactly the trials that
use it, whose stored results then read as superseded. (A key schema stored beside each trial
would have needed a migration and a second key per planned trial to keep old results matched.)

The same holds for a trial's intra-op torch threads, which change a CPU trial's float
reductions: the suite decides them (`resources.cpus`, whatever the backend or `--workers`), and
they enter the config, so the key, only when not `DEFAULT_THREADS` (`TrialRecipe.config`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel

from harness.env import cuda_available, method_library_versions, package_versions
from harness.lazy_registry import INITIAL_VERSION, Entry, suggest
from harness.records import PlannedTrial
from harness.registry import FAMILY_TABLE, MODELS, TASKS, ModelEntry
from harness.spec.plugins import is_plugin, plugin_digest
from harness.spec.recipe import TrialRecipe, parsed_section, resolved_settings, with_evaluation
from harness.spec.resolve import matrix_cells, trial_settings
from harness.spec.schema import Suite


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def trial_key(identity: dict[str, Any], recipe: TrialRecipe, fingerprint: str) -> str:
    """SHA-256 of who the trial is (suite, method, model, task), its config, versions, data."""
    return key_of(identity, recipe.config, fingerprint, package_versions(), trial_versions(recipe))


def key_of(
    identity: dict[str, Any],
    config: dict[str, Any],
    fingerprint: str,
    packages: dict[str, str],
    versions: dict[str, Any],
) -> str:
    """The key from its parts; `versions` (entries and method libraries off their initial
    values) is left out when empty, as in keys computed before entries had versions."""
    payload = {
        "trial": identity,
        "config": config,
        "versions": packages,
        "data": fingerprint,
    }
    if versions:
        payload["method_versions"] = versions
    return hashlib.sha256(canonical(payload).encode()).hexdigest()


def used_entries(recipe: TrialRecipe) -> dict[str, Entry[Any]]:
    """The registry entries a trial of this recipe uses, by "FAMILY:NAME" (FAMILY as in
    `FAMILY_TABLE`, e.g. `optimizer.name:lamb`)."""
    found = {}
    for family in FAMILY_TABLE:
        if family.config_path is None or (family.training and not recipe.kind.trains):
            continue
        name: Any = recipe.config
        for part in family.config_path.split("."):
            name = name.get(part) if isinstance(name, dict) else None
        if isinstance(name, str) and name in family.registry:
            found[f"{family.key}:{name}"] = family.registry.entry(name)
    return found


def trial_versions(recipe: TrialRecipe) -> dict[str, Any]:
    """The versions of the entries the trial uses that are past their first, of the method
    libraries those entries use that are not at their baseline (see the module docstring), and
    the source digests of the plugin entries it uses (`harness.spec.plugins`: none for a trial
    of built-ins alone, whose key stays as it was)."""
    entries = used_entries(recipe)
    changed = method_library_versions()
    versions: dict[str, Any] = {
        key: entry.version for key, entry in entries.items() if entry.version != INITIAL_VERSION
    }
    libraries = {
        lib: changed[lib] for e in entries.values() for lib in e.libraries if lib in changed
    }
    plugins = {key: plugin_digest(e) for key, e in entries.items() if is_plugin(e)}
    return {
        **versions,
        **({"libraries": libraries} if libraries else {}),
        **({"plugins": plugins} if plugins else {}),
    }


def plans_for_gpu(suite: Suite) -> bool:
    """Whether `device: auto` (and so `precision`, `train.compile` and the optimizer's `auto`
    values) is resolved for a GPU: as the suite's `resources.gpus` says when it says it, so that a
    login node without a GPU plans (and `layerbench rank` finds) the keys that the cluster's GPU
    workers run; else whether this machine has a GPU (the local backend's trials run here)."""
    if suite.resources.gpus is not None:
        return suite.resources.gpus > 0
    return cuda_available()


def plan_suite(suite: Suite) -> list[PlannedTrial]:
    """Every trial of a (validated) suite, in a stable order: cell, sweep point, seed."""
    models = {name: parsed_section(MODELS, spec) for name, spec in suite.models.items()}
    tasks = {name: parsed_section(TASKS, spec) for name, spec in suite.tasks.items()}
    fingerprints = {name: task_fingerprint(spec) for name, spec in suite.tasks.items()}
    cuda = plans_for_gpu(suite)
    settings_of = {  # each method's sweep points, resolved for their device
        name: [
            (point, resolved_settings(each, cuda)) for point, each in trial_settings(suite, name)
        ]
        for name in suite.methods
    }
    trials = []
    for method, model, task in matrix_cells(suite):
        for point, settings in settings_of[method]:
            section = with_overrides(suite.models[model], settings.model) or models[model]
            for seed in suite.seed_list:
                evaluated = settings.evaluate
                recipe = (
                    TrialRecipe.of(
                        settings,
                        section,
                        tasks[task],
                        seed=seed,
                        plugins=suite.plugins,
                        threads=suite.resources.threads,
                    )
                    .over(suite.resources.ranks)
                    .evaluating(tasks[evaluated] if evaluated else None)
                )
                identity = {"suite": suite.suite, "method": method, "model": model, "task": task}
                fingerprint = fingerprints[task]
                if recipe.evaluation is not None and evaluated:
                    fingerprint = with_evaluation(fingerprint, fingerprints[evaluated])
                key = trial_key(identity, recipe, fingerprint)
                trials.append(
                    PlannedTrial(key, suite.suite, method, model, task, seed, point, recipe)
                )
    return trials


def with_overrides(
    section: dict[str, Any], overrides: dict[str, Any]
) -> tuple[ModelEntry, BaseModel] | None:
    """A model section with a method's `model` fields set (`TrialSettings.model`), validated;
    None when the method sets none."""
    return parsed_section(MODELS, {**section, **overrides}) if overrides else None


def task_fingerprint(spec: dict[str, Any]) -> str:
    """The task's data fingerprint (cheap: it hashes files, it does not tokenize)."""
    entry, params = parsed_section(TASKS, spec)
    return entry.fingerprint(params)


ONLY_FIELDS = ("method", "model", "task", "seed", "key")


class SelectionError(ValueError):
    """An `--only` filter that is malformed or names something the suite's plan lacks."""


def select_trials(trials: list[PlannedTrial], only: str) -> list[PlannedTrial]:
    """The trials matching `only` = "FIELD=NAME[,NAME...][,FIELD=NAME...]": a trial is kept when,
    for every FIELD named, its value is one of that field's names (`method=a,b,seed=0` keeps the
    seed-0 trials of a and b; `key=` names a trial by its full key, e.g. one sweep point).

    Names match exactly (model=gpt-12l never selects gpt-12l-untied); a name the plan does not
    have raises SelectionError with the closest known name.
    """
    kept = trials
    for field, names in parse_only(only).items():
        known = list(dict.fromkeys(str(getattr(trial, field)) for trial in trials))
        unknown = [name for name in names if name not in known]
        if unknown:
            raise SelectionError(f"--only {only}: {unknown_names(field, unknown, known)}")
        kept = [trial for trial in kept if str(getattr(trial, field)) in names]
    return kept


def parse_only(only: str) -> dict[str, list[str]]:
    """`--only`'s names by field: a comma-separated item with `=` starts a field, one without
    adds a name to the field before it."""
    found: dict[str, list[str]] = {}
    field = None
    for item in only.split(","):
        name, sep, value = item.partition("=")
        if sep:
            field, item = name.strip(), value
            if field not in ONLY_FIELDS or field in found:
                field = None
            else:
                found[field] = []
        if field is None or not item.strip():
            raise SelectionError(
                f"--only expects FIELD=NAME[,NAME][,FIELD=NAME] with FIELD one of "
                f"{', '.join(ONLY_FIELDS)}: {only!r}"
            )
        found[field].append(item.strip())
    return found


def unknown_names(field: str, unknown: list[str], known: list[str]) -> str:
    """The message: unknown model 'x' (did you mean 'y'?); this suite's models: a, b."""
    shown = []
    for name in unknown:
        close = suggest(name, known)
        shown.append(f"'{name}'" + (f" (did you mean '{close}'?)" if close else ""))
    return f"unknown {field} {', '.join(shown)}; this suite's {field}s: {', '.join(known)}"
