"""Turn a method into resolved trial settings: `extends` chains, defaults merging, sweeps."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from harness.registry import OPTIMIZERS
from harness.spec.schema import MatrixEntry, MethodSpec, Suite, TrialSettings

METHOD_ONLY_FIELDS = {"extends", "description", "sweep"}


class ResolveError(ValueError):
    """A method that cannot be resolved; `loc` is the field path that caused it."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        self.loc = loc
        super().__init__(message)


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` merged into a copy of `base`, recursing into nested mappings."""
    merged = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def method_chain(suite: Suite, name: str) -> list[str]:
    """The method and its `extends` ancestors, root first."""
    chain = [name]
    while (parent := suite.methods[chain[-1]].extends) is not None:
        if parent not in suite.methods:
            raise ResolveError(("methods", chain[-1], "extends"), f"unknown method '{parent}'")
        if parent in chain:
            cycle = " -> ".join([*chain, parent])
            raise ResolveError(("methods", chain[-1], "extends"), f"extends cycle: {cycle}")
        chain.append(parent)
    return chain[::-1]


def set_fields(method: MethodSpec) -> dict[str, Any]:
    """The trial fields a method sets explicitly."""
    return method.model_dump(exclude_unset=True, exclude=METHOD_ONLY_FIELDS)


def resolve_method(suite: Suite, name: str) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """The method's settings merged over the defaults, and its (possibly inherited) sweep."""
    settings = suite.defaults.model_dump()
    sweep: dict[str, list[Any]] = {}
    for ancestor in method_chain(suite, name):
        method = suite.methods[ancestor]
        settings = deep_merge(settings, set_fields(method))
        if "sweep" in method.model_fields_set:
            sweep = method.sweep
    return settings, sweep


def sweep_points(sweep: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every point of the grid over the swept fields; `[{}]` when nothing is swept."""
    keys = sorted(sweep)
    return [
        dict(zip(keys, values, strict=True))
        for values in itertools.product(*(sweep[key] for key in keys))
    ]


def with_point(settings: dict[str, Any], point: dict[str, Any]) -> dict[str, Any]:
    """`settings` with each dotted field of `point` set."""
    result = copy.deepcopy(settings)
    for dotted, value in point.items():
        *parents, leaf = dotted.split(".")
        node = result
        for part in parents:
            if not isinstance(node.get(part), dict):
                raise ResolveError(("sweep", dotted), f"'{dotted}' does not name a field")
            node = node[part]
        if leaf not in node and not _allows_extra(parents):
            raise ResolveError(("sweep", dotted), f"'{dotted}' does not name a field")
        node[leaf] = value
    return result


def _allows_extra(parents: list[str]) -> bool:
    """Sections whose method-specific fields are checked against the registry later."""
    return parents in (["norm"], ["optimizer"])


def trial_settings(suite: Suite, name: str) -> list[tuple[dict[str, Any], TrialSettings]]:
    """(sweep point, validated settings) for every point of the method's sweep."""
    settings, sweep = resolve_method(suite, name)
    return [
        (point, TrialSettings.model_validate(with_point(settings, point)))
        for point in sweep_points(sweep)
    ]


def matrix_cells(suite: Suite) -> list[tuple[str, str, str]]:
    """(method, model, task) for every cell of the matrix, in suite order, without repeats."""
    entries = suite.matrix or [
        MatrixEntry(methods=list(suite.methods), models=list(suite.models), tasks=list(suite.tasks))
    ]
    cells: dict[tuple[str, str, str], None] = {}
    for entry in entries:
        for method in entry.methods:
            for model in entry.models:
                for task in entry.tasks:
                    cells[(method, model, task)] = None
    return list(cells)


def runs_on_cuda(device: str, cuda: bool) -> bool:
    """Whether a trial with `device` runs on a GPU; `cuda`: whether `device: auto` finds one."""
    return device.startswith("cuda") or (device == "auto" and cuda)


def resolve_precision(precision: str, device: str, cuda: bool) -> str:
    """`auto` is bf16 on a CUDA device and fp32 on the CPU (so CPU results stay comparable with
    those stored before); `cuda` says whether `device: auto` finds a GPU. Others are kept."""
    if precision != "auto":
        return precision
    return "bf16" if runs_on_cuda(device, cuda) else "fp32"


def resolve_compile(compile: bool | str, device: str, cuda: bool) -> bool:
    """`train.compile: auto` is on for a CUDA device and off on the CPU, where compiling takes
    longer than the short trials it would speed up (docs/performance.md); others are kept."""
    if compile != "auto":
        return bool(compile)
    return runs_on_cuda(device, cuda)


def resolved_optimizer(optimizer: dict[str, Any], device: str, cuda: bool) -> dict[str, Any]:
    """A trial's optimizer section with its per-device `auto` values resolved for the trial's
    device by its entry's `on_device` hook (e.g. Muon's `ns_dtype`), so that the value that
    runs is the value in the trial config (and its key)."""
    name = optimizer.get("name")
    if name not in OPTIMIZERS.names():
        return optimizer
    hook = OPTIMIZERS.entry(name).on_device
    return optimizer if hook is None else hook(optimizer, runs_on_cuda(device, cuda))
