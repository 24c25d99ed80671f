"""Load a suite file: YAML with line numbers, then Pydantic and registry validation.

Every problem is reported as `file:line: field.path: message; did you mean 'x'?`.
"""

from __future__ import annotations

import importlib
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from harness.lazy_registry import UnknownNameError, suggest
from harness.spec.plugins import (
    PluginImportError,
    PluginSourceError,
    installed_plugins,
    plugin_digest,
    plugin_entries,
)

Loc = tuple[str | int, ...]
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a suite file."""

    file: str
    line: int
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{self.file}:{self.line}: {where}{self.message}"


class SuiteError(ValueError):
    """A suite that cannot be run, with every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(map(str, problems)))


class Locator:
    """Maps field paths of a YAML document to the lines where they are written."""

    def __init__(self, file: str, root: yaml.Node | None) -> None:
        self.file = file
        self.lines: dict[Loc, int] = {}
        if root is not None:
            self.lines[()] = root.start_mark.line + 1
            self._walk(root, ())

    def _walk(self, node: yaml.Node, loc: Loc) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if not isinstance(key, yaml.ScalarNode):
                    continue  # a list or mapping as a key: Pydantic rejects it, located above
                self.lines[(*loc, key.value)] = key.start_mark.line + 1
                self._walk(value, (*loc, key.value))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self.lines[(*loc, index)] = item.start_mark.line + 1
                self._walk(item, (*loc, index))

    def line(self, loc: Loc) -> int:
        """The line of the deepest written prefix of `loc`."""
        for end in range(len(loc), -1, -1):
            if loc[:end] in self.lines:
                return self.lines[loc[:end]]
        return 1

    def problem(self, loc: Loc, message: str) -> Problem:
        return Problem(self.file, self.line(loc), ".".join(map(str, loc)), message)


def read_yaml(path: Path) -> tuple[Any, Locator]:
    """Parse `path` safely, keeping the line of every field; raises SuiteError."""
    file = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SuiteError([Problem(file, 0, "", f"cannot read the suite: {exc.strerror}")]) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        if root is not None and (bomb := alias_bomb(file, root)):
            raise SuiteError([bomb])
        data = yaml.safe_load(text)  # plain data only: no tag constructs an object
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise SuiteError([Problem(file, line, "", yaml_message(exc))]) from None
    locator = Locator(file, root)
    if duplicates := list(duplicate_keys(file, root)):
        raise SuiteError(duplicates)
    if data is None:
        raise SuiteError(
            [
                Problem(
                    file,
                    1,
                    "",
                    "the file is empty; a suite needs at least "
                    "`suite`, `models`, `tasks` and `methods`",
                )
            ]
        )
    if not isinstance(data, dict):
        raise SuiteError([locator.problem((), "a suite must be a mapping of fields")])
    return data, locator


MAX_NODES = 100_000
"""The most YAML nodes a suite may expand to once its aliases are resolved (the largest suite
of the repository has a few thousand): an "alias bomb" (nested anchors, each referenced many
times) would otherwise take minutes and gigabytes to load and validate."""


def expanded_sizes(root: yaml.Node) -> dict[int, int]:
    """The number of nodes under each node (by id) once aliases are expanded: linear in the
    file, since an alias is the same node object as its anchor (memoized); a cycle counts as
    more than MAX_NODES."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes and not children_done:
            continue
        children = child_nodes(node)
        if children_done:
            sizes[id(node)] = min(MAX_NODES + 1, 1 + sum(sizes.get(id(c), 0) for c in children))
            continue
        sizes.setdefault(id(node), MAX_NODES + 1)  # a cycle back here reads as too large
        stack.append((node, True))
        stack += [(child, False) for child in children if id(child) not in sizes]
    return sizes


def child_nodes(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def alias_bomb(file: str, root: yaml.Node) -> Problem | None:
    """A problem at the node whose aliases expand the document past MAX_NODES, if any."""
    sizes = expanded_sizes(root)
    if sizes[id(root)] <= MAX_NODES:
        return None
    node, seen = root, {id(root)}
    while big := [c for c in child_nodes(node) if sizes[id(c)] > MAX_NODES and id(c) not in seen]:
        node = big[0]
        seen.add(id(node))
    message = (
        f"YAML aliases expand this to more than {MAX_NODES:,} values (nested anchors referenced "
        "many times, or an alias inside its own anchor): write the suite out, or use `extends` "
        "and `sweep`"
    )
    return Problem(file, node.start_mark.line + 1, "", message)


def yaml_message(exc: yaml.YAMLError) -> str:
    """A YAML error in a sentence; a tag that would build a Python object is refused."""
    reason = getattr(exc, "problem", None) or str(exc)
    if isinstance(exc, yaml.constructor.ConstructorError):
        return f"YAML tag refused ({reason}): a suite is plain data, loaded with yaml.safe_load"
    return f"YAML syntax error: {reason}"


def duplicate_keys(file: str, node: yaml.Node | None, loc: Loc = ()) -> Iterator[Problem]:
    """Every key written twice in one mapping, at the line of its second occurrence."""
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else None
            line = key.start_mark.line + 1
            if name is not None and name != "<<" and name in seen:
                path = ".".join(map(str, (*loc, name)))
                message = f"duplicate key (first written at line {seen[name]})"
                yield Problem(file, line, path, message)
            elif name is not None:
                seen[name] = line
            yield from duplicate_keys(file, value, (*loc, name) if name is not None else loc)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield from duplicate_keys(file, item, (*loc, index))


def validated(
    schema: type[M], data: Any, locator: Locator, prefix: Loc = ()
) -> tuple[M | None, list[Problem]]:
    """`schema.model_validate(data)`, or None and the located problems.

    Pydantic turns a ValueError raised in a validator into a located error; anything else a
    validator raises is located at `prefix` here, so no validator can end `validate` in a traceback.
    """
    try:
        return schema.model_validate(data), []
    except ValidationError as error:
        return None, pydantic_problems(error, schema, locator, prefix)
    except Exception as error:  # a validator's bug is still located
        return None, [locator.problem(prefix, f"{type(error).__name__}: {error}")]


def pydantic_problems(
    error: ValidationError, model: type[BaseModel], locator: Locator, prefix: Loc = ()
) -> list[Problem]:
    """Translate a Pydantic error into located problems with suggestions for unknown keys."""
    problems = []
    for detail in error.errors():
        loc = (*prefix, *detail["loc"])
        if detail["type"] == "extra_forbidden":
            known = field_names(model, tuple(detail["loc"][:-1]))
            close = suggest(str(loc[-1]), known)
            hint = f"; did you mean '{close}'?" if close else f" (allowed: {', '.join(known)})"
            problems.append(locator.problem(loc, f"unknown field{hint}"))
        else:
            problems.append(locator.problem(loc, error_message(detail)))
    return problems


def error_message(detail: Any) -> str:
    """Pydantic's message; a ValueError from a validator as its own text, with a suggestion."""
    cause = detail.get("ctx", {}).get("error")
    if isinstance(cause, UnknownNameError):
        close = cause.suggestion
        hint = f"; did you mean '{close}'?" if close else f" (known: {', '.join(cause.known)})"
        return f"unknown {cause.family} '{cause.name}'{hint}"
    if isinstance(cause, ValueError | AssertionError) and str(cause):
        return str(cause)
    return str(detail["msg"])


def field_names(model: type[BaseModel], loc: Loc) -> list[str]:
    """The field names allowed at `loc` inside `model` (for "did you mean")."""
    annotation: Any = model
    for part in loc:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            if field is None:
                return []
            annotation = field.annotation
        else:
            args = typing.get_args(annotation)
            annotation = args[-1] if args else Any
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return sorted(annotation.model_fields)
    return []


def _unwrap(annotation: Any) -> Any:
    """`X | None` -> X."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def unknown_name_problem(locator: Locator, loc: Loc, error: UnknownNameError) -> Problem:
    hint = f"; did you mean '{error.suggestion}'?" if error.suggestion else ""
    return locator.problem(loc, f"unknown {error.family} '{error.name}'{hint}")


def import_plugins(modules: Iterable[str], locator: Locator) -> Iterator[Problem]:
    """Import the installed plugin packages (`harness.spec.plugins`), then the suite's plugin
    modules (this runs their code: only what is installed or the suite lists)."""
    try:
        installed_plugins()
    except PluginImportError as error:
        yield locator.problem(("plugins",), str(error))
    for index, module in enumerate(modules):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            yield locator.problem(("plugins", index), f"cannot import plugin '{module}': {exc}")
    for _, entry in plugin_entries():
        try:
            plugin_digest(entry)
        except PluginSourceError as error:
            yield locator.problem(("plugins",), str(error))
