"""`layerbench schema` (issue 37): the JSON Schema of a suite file, for editors. Every suite of
suites/ validates against it, every field in it is described, and a model or task section is
checked against its type's fields."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator

from tests.factories import ROOT, invoke

SUITES = sorted(
    path for path in (ROOT / "suites").rglob("*.yaml") if "tasks" not in path.parts
)  # suites/tasks/ holds lm-eval task definitions, not suites


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    printed = invoke("schema")
    assert printed.exit_code == 0, printed.output
    document: dict[str, Any] = json.loads(printed.stdout)
    Draft202012Validator.check_schema(document)
    return document


@pytest.mark.parametrize("path", SUITES, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_suite_validates(schema: dict[str, Any], path: Path) -> None:
    errors = list(Draft202012Validator(schema).iter_errors(yaml.safe_load(path.read_text())))
    assert [f"{list(error.absolute_path)}: {error.message}" for error in errors] == []


def test_every_suite_is_found() -> None:
    assert len(SUITES) >= 13 and ROOT / "suites" / "findings" / "muon.yaml" in SUITES


def properties(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, schema) of every property the document declares: the suite's and each
    definition's."""
    for where, declared in [("", schema), *schema["$defs"].items()]:
        for name, field in declared.get("properties", {}).items():
            yield f"{where}.{name}", field


def test_every_field_has_a_description(schema: dict[str, Any]) -> None:
    fields = dict(properties(schema))
    assert len(fields) > 150
    assert [where for where, field in fields.items() if not field.get("description")] == []


def suite_with(**sections: dict[str, Any]) -> dict[str, Any]:
    return {
        "suite": "typed",
        "models": {"tiny": {"type": "gpt", "n_layers": 2}},
        "tasks": {"bytes": {"type": "lm", "seq_len": 32}},
        "methods": {"pre-ln": {}},
        **sections,
    }


def messages(schema: dict[str, Any], suite: dict[str, Any]) -> list[str]:
    return [error.message for error in Draft202012Validator(schema).iter_errors(suite)]


def test_sections_are_a_union_discriminated_by_type(schema: dict[str, Any]) -> None:
    """A section takes the fields of the type it names, and names one."""
    models = schema["properties"]["models"]["additionalProperties"]
    assert models["discriminator"]["propertyName"] == "type"
    assert {"gpt", "pretrained"} <= set(models["discriminator"]["mapping"])
    tasks = schema["properties"]["tasks"]["additionalProperties"]["discriminator"]["mapping"]
    assert {"lm", "synthetic", "lm-eval", "perplexity"} <= set(tasks)
    assert messages(schema, suite_with()) == []
    pretrained = {"small": {"type": "pretrained", "source": "smollm2-135m"}}
    assert messages(schema, suite_with(models=pretrained)) == []
    for bad in (
        {"type": "gpt", "n_layer": 2},  # a typo
        {"type": "pretrained", "n_layers": 2},  # a gpt field in a pretrained section
        {"n_layers": 2},  # no type
        {"type": "gpt", "n_layers": 0},
    ):
        assert messages(schema, suite_with(models={"tiny": bad})), bad
    assert messages(schema, suite_with(tasks={"bytes": {"type": "lm", "kind": "x"}}))


def test_a_section_describes_the_parameters_of_the_entry_it_names(schema: dict[str, Any]) -> None:
    """A norm, optimizer, layerwise or synthetic section's further keys are the parameters of the
    entry it names: an editor offers them, and a value out of range is flagged."""
    good = {
        "mix": {"norm": {"placement": "mix", "post_fraction": 0.5, "type": "dyt", "alpha_init": 1}},
        "muon": {"optimizer": {"name": "muon", "ns_steps": 3, "layerwise": {"name": "lisa"}}},
        "partial": {"norm": {"post_fraction": 0.5}},  # its placement comes from elsewhere
    }
    synthetic = {"adds": {"type": "synthetic", "kind": "modular-addition", "modulus": 13}}
    assert messages(schema, suite_with(methods=good, tasks=synthetic)) == []
    for method in (
        {"norm": {"placement": "mix", "post_fraction": 2}},
        {"norm": {"type": "dyt", "alpha_init": -1}},
        {"optimizer": {"name": "muon", "ns_dtype": "float16"}},
        {"optimizer": {"layerwise": {"name": "lisa", "interval": 0}}},
    ):
        assert messages(schema, suite_with(methods={"bad": method})), method
    modulus = {"adds": {"type": "synthetic", "kind": "modular-addition", "modulus": 1}}
    assert messages(schema, suite_with(tasks=modulus))
