"""Source digests: what a method's code is, as a hash of syntax trees.

A digest hashes an implementation and every function and class it reaches by name within the
given implementation packages, as syntax trees without docstrings (comments and formatting do
not count, helpers do), with the module constants it names. Built-in entries are checked against
their recorded digests (`harness.runner.sources`); a plugin's digest enters the keys of the
trials that use its entries (`harness.spec.plan.trial_versions`). Computing one reads the
source of objects already imported; it imports nothing.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import sys
import textwrap
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from harness.env import METHOD_LIBRARIES

IMPLEMENTATION_PACKAGES = (
    "harness.methods.",
    "harness.models.",
    "harness.tasks.",
    "harness.data.",
    "harness.diagnostics",
    "harness.utils",
)
DECLARATIONS = ("harness.methods.catalog", "harness.models.catalog", "harness.tasks.catalog")
"""Catalogs declare entries; their parameter models' defaults are in every trial's config."""
LIBRARY_MODULES = {"pytorch_optimizer": "pytorch-optimizer", "optimum": "optimum-quanto"}
"""Import names of METHOD_LIBRARIES that differ from their distribution's name."""


def implementation(value: Any, packages: tuple[str, ...] = IMPLEMENTATION_PACKAGES) -> bool:
    """A function or class of one of `packages` (not of a catalog)."""
    if not (inspect.isfunction(value) or inspect.isclass(value)):
        return False
    module = getattr(value, "__module__", "") or ""
    return module not in DECLARATIONS and any(
        module == package.rstrip(".") or module.startswith(package) for package in packages
    )


def constant(value: Any) -> bool:
    """A module constant whose value is written in the code (a number, a string, a tuple, list,
    set or dict of them...): its value counts in the digest of the code that names it."""
    if isinstance(value, dict):
        return all(constant(key) and constant(item) for key, item in value.items())
    if isinstance(value, tuple | list | set | frozenset):
        return all(constant(item) for item in value)
    return isinstance(value, int | float | str | bytes | bool) or value is None


def literal(value: Any) -> str:
    """A constant's value as text, the same in every process: its `repr`, but a set's items
    sorted (their order follows string hashing, which changes from process to process)."""
    if isinstance(value, set | frozenset):
        return f"{type(value).__name__}({sorted(literal(item) for item in value)})"
    if isinstance(value, dict):
        items = ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items())
        return f"{{{items}}}"
    if isinstance(value, list):
        return f"[{', '.join(literal(item) for item in value)}]"
    if isinstance(value, tuple):
        items = ", ".join(literal(item) for item in value)
        return f"({items},)" if len(value) == 1 else f"({items})"
    return repr(value)


def without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                node.body = body[1:] or [ast.Pass()]
    return tree


def referenced(tree: ast.AST, namespace: dict[str, Any]) -> Iterator[Any]:
    """The objects `tree` names (`name` or `module.name`) in its module's namespace."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in namespace:
            yield namespace[node.id]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = namespace.get(node.value.id)
            if isinstance(owner, types.ModuleType):
                yield getattr(owner, node.attr, None)


def imported_libraries(tree: ast.AST) -> Iterator[str]:
    """The METHOD_LIBRARIES that `tree` imports (the schemes import theirs in their bodies)."""
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            top = name.partition(".")[0]
            library = LIBRARY_MODULES.get(top, top)
            if library in METHOD_LIBRARIES:
                yield library


@dataclass(frozen=True)
class Source:
    """What an entry's implementation is: its digest and the method libraries it imports."""

    digest: str
    libraries: tuple[str, ...]


@dataclass(frozen=True)
class Parsed:
    """One function or class as a digest sees it: its syntax tree without docstrings (dumped),
    the method libraries it imports, the implementations and the constants it names."""

    dump: str
    libraries: frozenset[str]
    reached: tuple[Any, ...]
    constants: tuple[str, ...]  # their `literal`


def parse(obj: Any, packages: tuple[str, ...] = IMPLEMENTATION_PACKAGES) -> Parsed:
    tree = without_docstrings(ast.parse(textwrap.dedent(inspect.getsource(obj))))
    namespace = vars(sys.modules[obj.__module__])
    named = list(referenced(tree, namespace))
    return Parsed(
        dump=ast.dump(tree),
        libraries=frozenset(imported_libraries(tree)),
        reached=tuple(value for value in named if implementation(value, packages)),
        constants=tuple(
            literal(v) for v in named if not implementation(v, packages) and constant(v)
        ),
    )


def source_of(
    target: Any,
    parsed: dict[str, Parsed] | None = None,
    packages: tuple[str, ...] = IMPLEMENTATION_PACKAGES,
) -> Source:
    """The digest of `target` and of every implementation of `packages` it reaches by name.
    `parsed` keeps each function and class parsed once across the entries of one `current`
    (entries share most of their helpers)."""
    parsed = {} if parsed is None else parsed
    seen: dict[str, str] = {}
    libraries: set[str] = set()
    pending = [inspect.unwrap(target)]
    while pending:
        obj = pending.pop()
        name = f"{obj.__module__}:{obj.__qualname__}"
        if name in seen:
            continue
        if name not in parsed:
            parsed[name] = parse(obj, packages)
        found = parsed[name]
        seen[name] = found.dump
        libraries.update(found.libraries)
        pending.extend(found.reached)
        seen.update({f"{name}:{value}": "" for value in found.constants})

    digest = hashlib.sha256(json.dumps(seen, sort_keys=True).encode()).hexdigest()
    return Source(digest, tuple(sorted(libraries)))
