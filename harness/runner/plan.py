"""Suite -> trials. A trial is (method after sweep expansion, model, task, seed).

Its key is the SHA-256 of the canonical resolved config, the versions that change results
and the task's data fingerprint, so an unchanged trial is never run twice.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from harness.methods.optimizers import resolved_optimizer
from harness.registry import MODELS, TASKS, Registry
from harness.runner.env import package_versions
from harness.spec.resolve import trial_settings
from harness.spec.schema import Suite


@dataclass(frozen=True)
class PlannedTrial:
    key: str
    suite: str
    method: str
    model: str
    task: str
    seed: int
    sweep: dict[str, Any]
    config: dict[str, Any]

    @property
    def label(self) -> str:
        point = ",".join(f"{k}={v}" for k, v in self.sweep.items())
        return f"{self.method}{f'[{point}]' if point else ''}/{self.model}/{self.task}/s{self.seed}"


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def trial_key(identity: dict[str, Any], config: dict[str, Any], fingerprint: str) -> str:
    """SHA-256 of who the trial is (suite, method, model, task), its config, versions, data."""
    payload = {
        "trial": identity,
        "config": config,
        "versions": package_versions(),
        "data": fingerprint,
    }
    return hashlib.sha256(canonical(payload).encode()).hexdigest()


def matrix_cells(suite: Suite) -> list[tuple[str, str, str]]:
    """(method, model, task) for every cell of the matrix, in suite order, without repeats."""
    entries = suite.matrix or [
        {"methods": list(suite.methods), "models": list(suite.models), "tasks": list(suite.tasks)}
    ]
    cells: dict[tuple[str, str, str], None] = {}
    for entry in entries:
        spec = entry if isinstance(entry, dict) else entry.model_dump()
        for method in spec["methods"]:
            for model in spec["models"]:
                for task in spec["tasks"]:
                    cells[(method, model, task)] = None
    return list(cells)


def plan_suite(suite: Suite) -> list[PlannedTrial]:
    """Every trial of a (validated) suite, in a stable order: cell, sweep point, seed."""
    models = {name: resolved(MODELS, spec) for name, spec in suite.models.items()}
    tasks = {name: resolved(TASKS, spec) for name, spec in suite.tasks.items()}
    fingerprints = {name: task_fingerprint(spec) for name, spec in tasks.items()}
    settings_of = {name: trial_settings(suite, name) for name in suite.methods}
    trials = []
    for method, model, task in matrix_cells(suite):
        for point, settings in settings_of[method]:
            for seed in suite.seeds:
                resolved_settings = settings.model_dump(mode="json")
                resolved_settings["optimizer"] = resolved_optimizer(
                    resolved_settings["optimizer"], settings.device
                )
                config = {
                    **resolved_settings,
                    "model": models[model],
                    "task": tasks[task],
                    "seed": seed,
                    "plugins": suite.plugins,
                }
                identity = {"suite": suite.suite, "method": method, "model": model, "task": task}
                key = trial_key(identity, config, fingerprints[task])
                trials.append(
                    PlannedTrial(key, suite.suite, method, model, task, seed, point, config)
                )
    return trials


def resolved(registry: Registry[Any], spec: dict[str, Any]) -> dict[str, Any]:
    """A model or task section with every default filled in."""
    return registry.entry(spec["type"]).params.model_validate(spec).model_dump(mode="json")


def task_fingerprint(spec: dict[str, Any]) -> str:
    """The task's data fingerprint (cheap: it hashes files, it does not tokenize)."""
    entry = TASKS.entry(spec["type"])
    return entry.obj.fingerprint(entry.params.model_validate(spec))
