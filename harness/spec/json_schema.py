"""The JSON Schema of a suite file (`layerbench schema`), for editors: the YAML language server
completes, documents and checks a suite as it is typed against it.

It is Pydantic's schema of `Suite`, every field described where it is declared, with one
addition: a model or task section, a plain mapping in `Suite` (its fields are checked against
its registry entry's schema after the type is known, `harness.spec.check`), is described here as
a union discriminated by `type` over the registered entries' schemas, so an editor offers the
fields of the type written. Validation at run time does not use this schema.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from harness.registry import MODELS, TASKS, Entry, Registry
from harness.spec.schema import Suite

DIALECT = "https://json-schema.org/draft/2020-12/schema"
SECTIONS: dict[str, Registry[Any]] = {"models": MODELS, "tasks": TASKS}
"""The suite fields whose sections are typed by a registry entry, and that registry."""


def suite_json_schema() -> dict[str, Any]:
    """The JSON Schema of a suite file, with every registered model and task type."""
    params = [
        entry.params
        for registry in SECTIONS.values()
        for entry in registry.entries()
        if entry.params is not None
    ]
    wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = [
        (model, "validation") for model in [Suite, *dict.fromkeys(params)]
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
    return {**schema, "$defs": defs}


def ref_name(ref: dict[str, str]) -> str:
    """The name in `$defs` of a `{"$ref": "#/$defs/NAME"}`."""
    return ref["$ref"].rsplit("/", 1)[-1]


def section_branch(entry: Entry[Any], ref: dict[str, str] | None) -> dict[str, Any]:
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
