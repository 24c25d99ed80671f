"""Nothing in the suite schema is silently ignored: every field is read somewhere."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from harness import registry as registry_module
from harness.lazy_registry import Registry
from harness.spec import SuiteError, load_suite
from harness.spec.schema import Suite
from tests.factories import ROOT, write_suite

NOT_YET_READ: set[str] = set()
"""Top-level sections another piece of work implements (none left: `regression` is the nightly
alerts')."""


def fields(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Dotted paths of every field of `model` and of the models it nests."""
    for name, info in model.model_fields.items():
        yield prefix + name
        for inner in _models(info.annotation):
            yield from fields(inner, f"{prefix}{name}.")


def _models(annotation: object) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for argument in typing.get_args(annotation):
        yield from _models(argument)


def sources() -> str:
    schema = ROOT / "harness" / "spec" / "schema.py"
    files = [*(ROOT / "harness").rglob("*.py"), *(ROOT / "leaderboard").rglob("*.py")]
    return "\n".join(path.read_text() for path in files if path != schema)


def test_every_suite_field_is_read_somewhere() -> None:
    code = sources()
    unread = [
        path
        for path in sorted(set(fields(Suite)))
        if path.split(".")[0] not in NOT_YET_READ
        and not re.search(
            rf"(\.{re.escape(path.split('.')[-1])}\b|[\"']{path.split('.')[-1]}[\"'])", code
        )
    ]
    assert unread == []


def test_rank_section_names_known_metrics_and_tasks(tmp_path: Path) -> None:
    extra = (
        "rank: {metric: val_loss, tune_metric: val_los, aggregate: performance_profile,\n"
        "       target: {metric: val_loss, value: {bytes: 4.0, words: 3.0}}}\n"
    )
    suite = write_suite(tmp_path, "pre-ln: {}", extra=extra)
    with pytest.raises(SuiteError) as error:
        load_suite(suite)
    problems = "\n".join(map(str, error.value.problems))
    assert "rank.tune_metric" in problems and "val_los" in problems
    assert "rank.target.value.words: unknown task 'words'" in problems
    no_target = write_suite(
        tmp_path, "pre-ln: {}", extra="rank: {aggregate: performance_profile}\n"
    )
    with pytest.raises(SuiteError, match="needs a `target`"):
        load_suite(no_target)


def section_models() -> Iterator[type[BaseModel]]:
    """The parameter schema of every registered entry (model and task sections, synthetic
    kinds, the methods' parameters), every registry of harness.registry."""
    for registry in vars(registry_module).values():
        if isinstance(registry, Registry):
            yield from (entry.params for entry in registry.entries() if entry.params is not None)


def model_fields(model: type[BaseModel]) -> Iterator[tuple[str, FieldInfo]]:
    """(dotted path, field) of every field of `model` and of the models it nests."""
    for name, info in model.model_fields.items():
        yield f"{model.__name__}.{name}", info
        for inner in _models(info.annotation):
            yield from model_fields(inner)


def test_every_suite_field_has_a_description() -> None:
    """Every field a suite may set is documented where it is declared (the editors' schema,
    `layerbench schema`, and `--help`-style hovers show it)."""
    models = [Suite, *section_models()]
    undocumented = sorted(
        {path for model in models for path, info in model_fields(model) if not info.description}
    )
    assert len(models) > 20
    assert undocumented == []
