"""Semantic checks of a parsed suite: names against registries, references, sweeps."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.lazy_registry import Entry, Registry, UnknownNameError, suggest
from harness.registry import (
    LAYER_IMPORTANCE,
    LAYERWISE,
    METRICS,
    MODELS,
    NORM_PLACEMENTS,
    NORM_TYPES,
    OPTIMIZERS,
    PRUNING,
    QUANTIZERS,
    SCHEDULES,
    TASKS,
    PretrainedModelEntry,
)
from harness.spec.constraints import (
    BlockShape,
    prune_problems,
    quantize_problems,
)
from harness.spec.devices import device_problems
from harness.spec.loader import (
    Loc,
    Locator,
    Problem,
    SuiteError,
    import_plugins,
    pydantic_problems,
    read_yaml,
    unknown_name_problem,
    validated,
)
from harness.spec.pairing import check_combinations
from harness.spec.recipe import declared_params
from harness.spec.resolve import ResolveError, matrix_cells, trial_settings
from harness.spec.schema import Suite, TrialSettings
from harness.spec.sections import LayerwiseSpec, NormSpec, OptimizerSpec

CORE_FIELDS = {"norm": NormSpec.model_fields, "optimizer": OptimizerSpec.model_fields}


def load_suite(
    path: str | Path,
    before_plugins: Callable[[list[str]], None] | None = None,
    gpus: int | None = None,
) -> Suite:
    """Read and fully validate a suite file; raises SuiteError listing every problem.

    The suite's `plugins` are imported (their code runs: nothing else in a suite does), after
    `before_plugins(plugins)` is called to say so. With `gpus`, the GPUs of the machine that
    will run its trials, the devices they ask for are checked against it (`device_problems`).
    """
    data, locator = read_yaml(Path(path))
    suite, problems = validated(Suite, data, locator)
    if suite is None:
        raise SuiteError(problems)
    if suite.plugins and before_plugins is not None:
        before_plugins(suite.plugins)
    problems = list(import_plugins(suite.plugins, locator))
    problems += list(check_suite(suite, locator))
    if gpus is not None and not problems:
        problems += device_problems(suite, locator, gpus)
    if problems:
        raise SuiteError(problems)
    return suite


def check_suite(suite: Suite, locator: Locator) -> Iterator[Problem]:
    yield from check_typed_sections(suite.models, "models", MODELS, locator)
    yield from check_typed_sections(suite.tasks, "tasks", TASKS, locator)
    yield from check_references(suite, locator)
    yield from check_combinations(suite, locator)
    yield from check_model_fit(suite, locator)
    yield from check_model_overrides(suite, locator)
    yield from check_context_fit(suite, locator)
    yield from check_ranks(suite, locator)
    for name in suite.methods:
        yield from check_method(suite, name, locator)
    yield from check_rank(suite, locator)
    for index in range(len(suite.expect)):
        yield from check_claim(suite, index, locator)


def check_ranks(suite: Suite, locator: Locator) -> Iterator[Problem]:
    """A trial over several ranks trains a model built here: a pretrained one runs in one
    process (`harness.runner.distributed`)."""
    if suite.resources.ranks == 1:
        return
    for name, section in suite.models.items():
        kind = str(section.get("type"))
        if kind in MODELS and isinstance(MODELS.entry(kind), PretrainedModelEntry):
            yield locator.problem(
                ("models", name, "type"),
                f"model '{name}' is pretrained, which runs in one process, but `resources` asks "
                f"for {suite.resources.ranks} ranks a trial; set `resources.tasks: 1` (and "
                "`nodes: 1`) or train a built model",
            )


def check_rank(suite: Suite, locator: Locator) -> Iterator[Problem]:
    """`rank` and `regression` name registered metrics; a per-task target names the suite's
    tasks."""
    rank, target = suite.rank, suite.rank.target
    metrics: list[tuple[Loc, str]] = [(("rank", "metric"), rank.metric)]
    metrics += [(("rank", "tune_metric"), rank.tune_metric)] if rank.tune_metric else []
    metrics += [(("rank", "target", "metric"), target.metric)] if target else []
    metrics += [(("regression", "metrics", i), m) for i, m in enumerate(suite.regression.metrics)]
    for loc, metric in metrics:
        yield from lookup(METRICS, metric, loc, locator)
    if target is not None and isinstance(target.value, dict):
        for task in target.value:
            if task not in suite.tasks:
                known = ", ".join(suite.tasks)
                yield locator.problem(
                    ("rank", "target", "value", task), f"unknown task '{task}' (tasks: {known})"
                )


def check_claim(suite: Suite, index: int, locator: Locator) -> Iterator[Problem]:
    """An `expect` claim names two defined methods, a registered metric, and recipes (models)
    on which both methods run on some task."""
    from harness.spec.resolve import matrix_cells

    claim, loc = suite.expect[index], ("expect", index)
    for field, name in [("method", claim.method), ("than", claim.than)]:
        if name is not None and name not in suite.methods:
            error = UnknownNameError("method", name, sorted(suite.methods))
            hint = f"; did you mean '{error.suggestion}'?" if error.suggestion else ""
            yield locator.problem((*loc, field), f"unknown method '{name}'{hint}")
    than = claim.than or suite.baseline
    if than is None:
        yield locator.problem(loc, "no `than` and no suite `baseline`: name the method compared")
    elif than == claim.method:
        yield locator.problem((*loc, "than"), f"'{than}' is compared with itself")
    if claim.metric is not None:
        yield from lookup(METRICS, claim.metric, (*loc, "metric"), locator)
    cells = set(matrix_cells(suite))
    for position, model in enumerate(claim.recipes or []):
        where = (*loc, "recipes", position)
        if model not in suite.models:
            yield undefined(locator, where, "models", model, suite.models)
        elif than is not None and not any(
            (claim.method, model, task) in cells and (than, model, task) in cells
            for task in suite.tasks
        ):
            yield locator.problem(
                where, f"'{claim.method}' and '{than}' never both run on model '{model}' (matrix)"
            )


def lookup(registry: Registry[Any], name: str, loc: Loc, locator: Locator) -> Iterator[Problem]:
    try:
        registry.entry(name)
    except UnknownNameError as error:
        yield unknown_name_problem(locator, loc, error)


def check_typed_sections(
    sections: dict[str, dict[str, Any]], field: str, registry: Registry[Any], locator: Locator
) -> Iterator[Problem]:
    """Each model/task must name a registered `type` and match that type's schema."""
    for name, section in sections.items():
        loc = (field, name)
        if not isinstance(section.get("type"), str):
            known = ", ".join(registry.names())
            where, what = (
                ((*loc, "type"), "'type' must be a name")
                if "type" in section
                else (loc, "missing field 'type'")
            )
            yield locator.problem(where, f"{what} (one of: {known})")
            continue
        try:
            entry = registry.entry(str(section["type"]))
        except UnknownNameError as error:
            yield unknown_name_problem(locator, (*loc, "type"), error)
            continue
        if entry.params is not None:
            yield from validated(entry.params, section, locator, loc)[1]


def check_references(suite: Suite, locator: Locator) -> Iterator[Problem]:
    """Matrix entries and the baseline must name defined methods, models and tasks."""
    for index, entry in enumerate(suite.matrix or []):
        sections: list[tuple[str, Mapping[str, object]]] = [
            ("methods", suite.methods),
            ("models", suite.models),
            ("tasks", suite.tasks),
        ]
        for field, defined in sections:
            for position, name in enumerate(getattr(entry, field)):
                if name not in defined:
                    yield undefined(
                        locator, ("matrix", index, field, position), field, name, defined
                    )
    if suite.baseline is not None and suite.baseline not in suite.methods:
        yield undefined(locator, ("baseline",), "methods", suite.baseline, suite.methods)


def undefined(
    locator: Locator, loc: Loc, field: str, name: str, defined: Mapping[str, object]
) -> Problem:
    error = UnknownNameError(field[:-1], name, sorted(defined))
    hint = f"; did you mean '{error.suggestion}'?" if error.suggestion else ""
    return locator.problem(loc, f"'{name}' is not defined in `{field}`{hint}")


def check_method(suite: Suite, name: str, locator: Locator) -> Iterator[Problem]:
    """Resolve the method (extends, defaults, every sweep point) and check its names."""
    base = ("methods", name)
    try:
        points = trial_settings(suite, name)
    except ResolveError as error:
        yield locator.problem((*base, *error.loc), str(error))
        return
    except ValidationError as error:
        yield from pydantic_problems(error, TrialSettings, locator, (*base, "sweep"))
        return
    for _, settings in points:
        problems = list(
            check_settings(settings, lambda loc: origin(suite, name, loc, locator), locator)
        )
        if problems:
            yield from problems
            return
        try:
            settings.train.micro_batches(suite.resources.ranks)
        except ValueError as error:
            field = "micro_batch_size" if settings.train.micro_batch_size else "batch_size"
            yield locator.problem(origin(suite, name, ("train", field), locator), str(error))
            return


def origin(suite: Suite, name: str, loc: Loc, locator: Locator) -> Loc:
    """Where a resolved field is written: the method, its sweep, an ancestor, or `defaults`."""
    candidates = [("methods", name, *loc), ("methods", name, "sweep")]
    ancestor = suite.methods[name].extends
    while ancestor is not None and ancestor in suite.methods:
        candidates.append(("methods", ancestor, *loc))
        ancestor = suite.methods[ancestor].extends
    candidates.append(("defaults", *loc))
    return next((c for c in candidates if c in locator.lines), ("methods", name, *loc))


def check_settings(
    settings: TrialSettings, where: Callable[[Loc], Loc], locator: Locator
) -> Iterator[Problem]:
    """Names in the resolved settings exist, and method parameters fit their schemas."""
    names: list[tuple[Loc, Registry[Any], str]] = [
        (("norm", "placement"), NORM_PLACEMENTS, settings.norm.placement),
        (("norm", "type"), NORM_TYPES, settings.norm.type),
        (("optimizer", "name"), OPTIMIZERS, settings.optimizer.name),
        (("train", "schedule"), SCHEDULES, settings.train.schedule),
    ]
    for loc, registry, value in names:
        yield from lookup(registry, value, where(loc), locator)
    sections: list[tuple[str, list[tuple[Registry[Any], str]]]] = [
        ("norm", [(NORM_PLACEMENTS, settings.norm.placement), (NORM_TYPES, settings.norm.type)]),
        ("optimizer", [(OPTIMIZERS, settings.optimizer.name)]),
    ]
    for section, registries in sections:
        extras = getattr(settings, section).model_extra or {}
        yield from check_extras(section, extras, registries, where, locator)
    yield from check_post_training(settings, None, where, locator)
    if settings.quantize is not None and settings.quantize.layerwise is not None:
        importance = settings.quantize.layerwise.importance
        loc = where(("quantize", "layerwise", "importance"))
        yield from lookup(LAYER_IMPORTANCE, importance, loc, locator)
    if settings.optimizer.layerwise is not None:
        yield from check_layerwise(settings.optimizer.layerwise, where, locator)


def check_post_training(
    settings: TrialSettings,
    shape: BlockShape | None,
    where: Callable[[Loc], Loc],
    locator: Locator,
) -> Iterator[Problem]:
    """`prune` and `quantize` within what their registry entries (and the model's `shape`) allow."""
    prune, quantize = settings.prune, settings.quantize
    if prune is not None:
        unknown = list(lookup(PRUNING, prune.criterion, where(("prune", "criterion")), locator))
        yield from unknown
        if not unknown:
            problems = prune_problems(prune, PRUNING.entry(prune.criterion), shape)
            yield from (locator.problem(where(loc), message) for loc, message in problems)
    if quantize is not None:
        unknown = list(lookup(QUANTIZERS, quantize.scheme, where(("quantize", "scheme")), locator))
        yield from unknown
        if not unknown:
            problems = quantize_problems(quantize, QUANTIZERS.entry(quantize.scheme), shape)
            yield from (locator.problem(where(loc), message) for loc, message in problems)


def check_model_fit(suite: Suite, locator: Locator) -> Iterator[Problem]:
    """Pruning counts and quantization groups each model of the method's cells can honour."""
    reported: set[str] = set()
    for method, model, _ in matrix_cells(suite):
        spec = section_spec(MODELS, suite.models.get(model), locator)
        if method not in suite.methods or spec is None or not hasattr(spec, "block_shape"):
            continue  # invalid (reported) or a model whose shape is known once loaded
        try:
            points = trial_settings(suite, method)
        except (ResolveError, ValidationError):
            continue  # reported by check_method
        shape = spec.block_shape()
        where = lambda loc, m=method: origin(suite, m, loc, locator)  # noqa: E731
        for _, settings in points:
            general = set(check_post_training(settings, None, where, locator))
            for problem in check_post_training(settings, shape, where, locator):
                text = f"{problem.message} (model '{model}')"
                if problem in general:
                    continue  # reported by check_method
                if text not in reported:
                    reported.add(text)
                    yield Problem(problem.file, problem.line, problem.path, text)


def check_model_overrides(suite: Suite, locator: Locator) -> Iterator[Problem]:
    """A method's `model` fields must fit the schema of every model it runs on."""
    reported: set[tuple[str, str]] = set()
    for method, model, _ in matrix_cells(suite):
        section = suite.models.get(model)
        if method not in suite.methods or not section or section.get("type") not in MODELS:
            continue
        entry = MODELS.entry(section["type"])
        try:
            points = trial_settings(suite, method)
        except (ResolveError, ValidationError):
            continue  # reported by check_method
        for _, settings in points:
            if not settings.model or entry.params is None or (method, model) in reported:
                continue
            try:
                entry.params.model_validate({**section, **settings.model})
            except ValidationError as error:
                reported.add((method, model))
                first = error.errors()[0]
                field = ".".join(map(str, first["loc"]))
                yield locator.problem(
                    origin(suite, method, ("model",), locator),
                    f"model.{field}: {first['msg']} (in model '{model}')",
                )


def section_spec(
    registry: Registry[Any], section: dict[str, Any] | None, locator: Locator
) -> Any | None:
    """A model or task section validated by its entry's schema (None if invalid: reported)."""
    if not section or section.get("type") not in registry:
        return None
    entry = registry.entry(section["type"])
    return validated(entry.params, section, locator)[0] if entry.params else None


def check_context_fit(suite: Suite, locator: Locator) -> Iterator[Problem]:
    """A task's windows (`seq_len`) fit the context of every model it runs on (`max_seq_len`)."""
    for model, task in dict.fromkeys((model, task) for _, model, task in matrix_cells(suite)):
        model_spec = section_spec(MODELS, suite.models.get(model), locator)
        task_spec = section_spec(TASKS, suite.tasks.get(task), locator)
        context = getattr(model_spec, "max_seq_len", None)
        window = getattr(task_spec, "seq_len", None)
        if isinstance(context, int) and isinstance(window, int) and window > context:
            yield locator.problem(
                ("tasks", task, "seq_len"),
                f"{window} is longer than the max_seq_len of model '{model}' ({context}): "
                f"lower seq_len or raise the model's max_seq_len",
            )


def check_layerwise(
    spec: LayerwiseSpec, where: Callable[[Loc], Loc], locator: Locator
) -> Iterator[Problem]:
    loc = ("optimizer", "layerwise")
    problems = list(lookup(LAYERWISE, spec.name, where((*loc, "name")), locator))
    if problems:
        yield from problems
        return
    schema = LAYERWISE.entry(spec.name).params
    if schema is None:
        return
    try:
        schema.model_validate(spec.model_extra or {})
    except ValidationError as error:
        for problem in pydantic_problems(error, schema, locator):
            yield locator.problem(where((*loc, problem.path.split(".")[0])), problem.message)


def check_extras(
    section: str,
    extras: dict[str, Any],
    registries: list[tuple[Registry[Any], str]],
    where: Callable[[Loc], Loc],
    locator: Locator,
) -> Iterator[Problem]:
    """Method-specific fields must belong to the schema of the chosen method."""
    schemas = [entry.params for entry in entries(registries) if entry.params is not None]
    allowed = {field for schema in schemas for field in schema.model_fields}
    fields = sorted(allowed | set(CORE_FIELDS[section]))
    for key in sorted(set(extras) - allowed):
        close = suggest(key, fields)
        if close:
            message = f"unknown field; did you mean '{close}'?"
        else:
            owners = " or ".join(f"{registry.family} '{name}'" for registry, name in registries)
            message = f"unknown field (not a parameter of {owners})"
        yield locator.problem(where((section, key)), message)
    for entry in entries(registries):
        if entry.params is None:
            continue
        try:
            entry.params.model_validate(declared_params(entry, extras))
        except ValidationError as error:
            for problem in pydantic_problems(error, entry.params, locator):
                loc = where((section, problem.path.split(".")[0]))
                yield locator.problem(loc, problem.message)


def entries(registries: list[tuple[Registry[Any], str]]) -> Iterator[Entry[Any]]:
    for registry, name in registries:
        if name in registry:
            yield registry.entry(name)
