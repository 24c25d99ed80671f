"""The JSON Schema of a suite file (`layerbench schema`), for editors: the YAML language server
completes, documents and checks a suite as it is typed against it.

It is Pydantic's schema of `Suite`, every field described where it is declared, with one
addition: a model or task section, a plain mapping in `Suite` (its fields are checked against
its registry entry's schema after the type is known, `harness.spec.check`), is described here as
a union discriminated by `type` over the registered entries' schemas, so an editor offers the
fields of the type written. Likewise a section whose further keys are the parameters of the entry
one of its fields names (`norm: {placement: mix, post_fraction: 0.3}`) describes those
parameters for each entry (`if` that field names it, `then` its parameters). Validation at run
time does not use this schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from harness.lazy_registry import Entry, Registry
from harness.registry import (
    LAYERWISE,
    MODELS,
    NORM_PLACEMENTS,
    NORM_TYPES,
    OPTIMIZERS,
    SYNTHETIC_KINDS,
    TASKS,
)
from harness.spec.schema import Suite
from harness.spec.sections import LayerwiseSpec, NormSpec, OptimizerSpec

DIALECT = "https://json-schema.org/draft/2020-12/schema"
SECTIONS: dict[str, Registry[Any]] = {"models": MODELS, "tasks": TASKS}
"""The suite fields whose sections are typed by a registry entry, and that registry."""
Refs = Mapping[tuple[Any, JsonSchemaMode], dict[str, Any]]


def named_params() -> list[tuple[type[BaseModel], str, Registry[Any]]]:
    """(a section's model, its field, a registry): the section takes the parameters of the entry
    its field names as further keys (a synthetic task, when that type is registered, its kind's)."""
    named: list[tuple[type[BaseModel], str, Registry[Any]]] = [
        (NormSpec, "placement", NORM_PLACEMENTS),
        (NormSpec, "type", NORM_TYPES),
        (OptimizerSpec, "name", OPTIMIZERS),
        (LayerwiseSpec, "name", LAYERWISE),
    ]
    synthetic = TASKS.entry("synthetic").params if "synthetic" in TASKS else None
    return named + ([(synthetic, "kind", SYNTHETIC_KINDS)] if synthetic is not None else [])


def suite_json_schema() -> dict[str, Any]:
    """The JSON Schema of a suite file, with every registered model and task type and every
    registered method's parameters."""
    named = named_params()
    registries = [*SECTIONS.values(), *(registry for _, _, registry in named)]
    params = [e.params for r in registries for e in r.entries() if e.params is not None]
    models = [Suite, *(model for model, _, _ in named), *params]
    wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (model, "validation") for model in dict.fromkeys(models)
    ]
    refs, definitions = models_json_schema(wanted, title="LayerBench suite")
    defs: dict[str, Any] = definitions["$defs"]
    schema: dict[str, Any] = {
        "$schema": DIALECT,
        **defs.pop(ref_name(refs[(Suite, "validation")])),
        "title": definitions["title"],
    }
    for field, registry in SECTIONS.items():
        branches = {
            entry.name: section_branch(
                entry, refs.get((entry.params, "validation")) if entry.params else None
            )
            for entry in registry.entries()
        }
        for name, branch in branches.items():
            defs[f"{field}.{name}"] = branch
        schema["properties"][field]["additionalProperties"] = section_union(field, branches)
    for model, field, registry in named:
        describe_params(defs, refs, model, field, registry)
    return {**schema, "$defs": defs}


def ref_name(ref: dict[str, Any]) -> str:
    """The name in `$defs` of a `{"$ref": "#/$defs/NAME"}`."""
    return str(ref["$ref"]).rsplit("/", 1)[-1]


def section_branch(entry: Entry[Any], ref: dict[str, Any] | None) -> dict[str, Any]:
    """The schema of a section of `entry`'s type: its parameter schema (any fields where it
    declares none) with `type` pinned to the entry's name."""
    pinned = {"const": entry.name, "description": type_description(entry)}
    return {
        **({"allOf": [ref]} if ref is not None else {}),
        "type": "object",
        "properties": {"type": pinned},
        "required": ["type"],
    }


def section_union(field: str, branches: dict[str, Any]) -> dict[str, Any]:
    """One of the branches, picked by the section's `type`."""
    mapping = {name: f"#/$defs/{field}.{name}" for name in branches}
    return {
        "description": f"A section of {field}: its `type` ({', '.join(branches)}) says which "
        "fields it takes.",
        "oneOf": [{"$ref": ref} for ref in mapping.values()],
        "discriminator": {"propertyName": "type", "mapping": mapping},
    }


def type_description(entry: Entry[Any]) -> str:
    """What a section of `entry`'s type is: its schema's `type` field's description, else the
    entry's summary (never the implementation's docstring, which would import it)."""
    declared = entry.params.model_fields.get("type") if entry.params is not None else None
    if declared is not None and declared.description:
        return declared.description
    return entry.summary or f"A {entry.family} of type '{entry.name}'."


def describe_params(
    defs: dict[str, Any], refs: Refs, model: type[BaseModel], field: str, registry: Registry[Any]
) -> None:
    """Add to `model`'s definition, for each entry of `registry` with parameters: if `field`
    names the entry, then the section's further keys are those parameters."""
    definition = defs[ref_name(refs[(model, "validation")])]
    for entry in registry.entries():
        if entry.params is None or not entry.params.model_fields:
            continue
        declared = defs[ref_name(refs[(entry.params, "validation")])]
        definition.setdefault("allOf", []).append(
            {
                "if": {"properties": {field: {"const": entry.name}}, "required": [field]},
                "then": {"properties": declared["properties"]},
            }
        )
