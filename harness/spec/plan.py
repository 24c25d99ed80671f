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
they enter the config, so the key, only when not `DEFAULT_THREADS` (`threads_field`).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import BaseModel

from harness.env import cuda_available, method_library_versions, package_versions
from harness.records import PlannedTrial
from harness.registry import (
    FAMILY_TABLE,
    INITIAL_VERSION,
    MODELS,
    TASKS,
    Entry,
    ModelEntry,
    PretrainedModelEntry,
    Registry,
    TaskEntry,
    suggest,
)
from harness.spec.resolve import (
    matrix_cells,
    resolve_compile,
    resolve_precision,
    resolved_optimizer,
    trial_settings,
)
from harness.spec.schema import DEFAULT_THREADS, ResourcesSpec, Suite


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def trial_key(identity: dict[str, Any], config: dict[str, Any], fingerprint: str) -> str:
    """SHA-256 of who the trial is (suite, method, model, task), its config, versions, data."""
    return key_of(identity, config, fingerprint, package_versions(), trial_versions(config))


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


def threads_field(resources: ResourcesSpec) -> dict[str, int]:
    """A trial config's `threads` (the intra-op torch threads its suite gives each trial), left
    out at `DEFAULT_THREADS`, so a trial keeps the key it had before the count was in it."""
    threads = resources.threads
    return {} if threads == DEFAULT_THREADS else {"threads": threads}


def trial_threads(config: dict[str, Any]) -> int:
    """The intra-op torch threads a trial of this config runs with, on every backend."""
    return int(config.get("threads", DEFAULT_THREADS))


def resolved_train(train: dict[str, Any], device: str, cuda: bool) -> dict[str, Any]:
    """A trial's train section with `compile` resolved for its device: `true` when the trial
    compiles, left out when it runs eager, so an eager trial keeps the key it had before
    `train.compile` existed (and a trial config without it runs eager)."""
    compiled = resolve_compile(train.get("compile", False), device, cuda)
    rest = {name: value for name, value in train.items() if name != "compile"}
    return {**rest, "compile": True} if compiled else rest


def used_entries(config: dict[str, Any]) -> dict[str, Entry[Any]]:
    """The registry entries a trial with this resolved config uses, by "FAMILY:NAME" (FAMILY
    as in `FAMILY_TABLE`, e.g. `optimizer.name:lamb`)."""
    model = MODELS.entry(config["model"]["type"])
    found = {}
    for family in FAMILY_TABLE:
        if family.config_path is None or (
            family.training and isinstance(model, PretrainedModelEntry)
        ):
            continue
        name: Any = config
        for part in family.config_path.split("."):
            name = name.get(part) if isinstance(name, dict) else None
        if isinstance(name, str) and name in family.registry:
            found[f"{family.key}:{name}"] = family.registry.entry(name)
    return found


def trial_versions(config: dict[str, Any]) -> dict[str, Any]:
    """The versions of the entries the trial uses that are past their first, and of the method
    libraries those entries use that are not at their baseline (see the module docstring)."""
    entries = used_entries(config)
    changed = method_library_versions()
    versions: dict[str, Any] = {
        key: entry.version for key, entry in entries.items() if entry.version != INITIAL_VERSION
    }
    libraries = {
        lib: changed[lib] for e in entries.values() for lib in e.libraries if lib in changed
    }
    return {**versions, **({"libraries": libraries} if libraries else {})}


def plan_suite(suite: Suite) -> list[PlannedTrial]:
    """Every trial of a (validated) suite, in a stable order: cell, sweep point, seed."""
    models = {name: resolved(MODELS, spec) for name, spec in suite.models.items()}
    tasks = {name: resolved(TASKS, spec) for name, spec in suite.tasks.items()}
    fingerprints = {name: task_fingerprint(spec) for name, spec in tasks.items()}
    settings_of = {name: trial_settings(suite, name) for name in suite.methods}
    cuda = cuda_available()
    threads = threads_field(suite.resources)
    trials = []
    for method, model, task in matrix_cells(suite):
        for point, settings in settings_of[method]:
            for seed in suite.seed_list:
                resolved_settings = settings.model_dump(mode="json")
                overrides = resolved_settings.pop("model")
                resolved_settings["optimizer"] = resolved_optimizer(
                    resolved_settings["optimizer"], settings.device, cuda
                )
                resolved_settings["train"] = resolved_train(
                    resolved_settings["train"], settings.device, cuda
                )
                config = {
                    **resolved_settings,
                    "precision": resolve_precision(settings.precision, settings.device, cuda),
                    "model": models[model]
                    if not overrides
                    else with_overrides(suite.models[model], overrides),
                    "task": tasks[task],
                    "seed": seed,
                    "plugins": suite.plugins,
                    **threads,
                }
                identity = {"suite": suite.suite, "method": method, "model": model, "task": task}
                key = trial_key(identity, config, fingerprints[task])
                trials.append(
                    PlannedTrial(key, suite.suite, method, model, task, seed, point, config)
                )
    return trials


def with_overrides(section: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A model section with a method's `model` fields set (`TrialSettings.model`), resolved."""
    return resolved(MODELS, {**section, **overrides})


def resolved(
    registry: Registry[ModelEntry] | Registry[TaskEntry], spec: dict[str, Any]
) -> dict[str, Any]:
    """A model or task section with every default filled in."""
    return section(registry.entry(spec["type"]), spec).model_dump(mode="json")


def section(entry: Entry[Any], spec: dict[str, Any]) -> BaseModel:
    """A model or task section validated by its entry's schema."""
    if entry.params is None:
        raise TypeError(f"{entry.family} '{entry.name}' declares no schema for its section")
    return entry.params.model_validate(spec)


def task_fingerprint(spec: dict[str, Any]) -> str:
    """The task's data fingerprint (cheap: it hashes files, it does not tokenize)."""
    entry = TASKS.entry(spec["type"])
    return entry.fingerprint(section(entry, spec))


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
