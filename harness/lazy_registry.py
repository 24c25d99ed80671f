"""The machinery of LayerBench's registries: a typed `Entry`, lazily imported, and a `Registry` of
one family's entries.

Modelled on lm-evaluation-harness's registry: a name collision is an error and an unknown name
raises with a "did you mean" suggestion. A built-in entry is *declared* in its package's
`catalog` module with its parameter model, its typed capabilities and a "module:attr" path to
its implementation; the implementation is imported on first use of `Entry.obj`. A plugin
registers an object directly with the `register` decorator. The families themselves (their entry
types, their registries, the family table) are in `harness.registry`.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

T = TypeVar("T")

INITIAL_VERSION = 1
"""Every entry's first version; a trial key names only the entries above it, so the keys of
trials stored before entries had versions are unchanged."""


class RegistryError(LookupError):
    """An unknown or duplicate name in a registry."""


class UnknownNameError(RegistryError, ValueError):
    """A name no entry has; a ValueError too, so Pydantic reports it from inside a validator."""

    def __init__(self, family: str, name: str, known: list[str]) -> None:
        self.family, self.name, self.known = family, name, known
        self.suggestion = suggest(name, known)
        hint = f"; did you mean '{self.suggestion}'?" if self.suggestion else ""
        super().__init__(f"unknown {family} '{name}'{hint} (known: {', '.join(known)})")


def suggest(name: str, known: list[str]) -> str | None:
    """The closest known name to `name`, if any is close enough."""
    matches = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return matches[0] if matches else None


def resolve(path: str) -> Any:
    """The object at "package.module:attr" (imports the module)."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True, kw_only=True)
class Entry(Generic[T]):
    """One registered method, model, task or metric.

    `target` is the object itself or a "module:attr" path imported on first use of `obj`.
    `version` is bumped when a change of the implementation can change results (lm-eval's task
    versions); `libraries` are the distributions whose code implements it (their installed
    versions enter the key of a trial that uses it: `harness.spec.plan.trial_key`).
    """

    name: str
    family: str
    target: T | str
    params: type[BaseModel] | None = None
    summary: str = ""
    version: int = INITIAL_VERSION
    libraries: tuple[str, ...] = ()
    missing: Callable[[Any], str | None] | None = None
    """(its validated section) -> the command that installs the data or model it needs and
    lacks here, or None (tasks and models; see `harness.store.coverage`)."""
    _resolved: list[T] = field(default_factory=list, repr=False, compare=False)

    @property
    def obj(self) -> T:
        if not isinstance(self.target, str):
            return self.target
        if not self._resolved:
            self._resolved.append(resolve(self.target))
        return self._resolved[0]

    @property
    def module(self) -> str | None:
        """The module that holds a lazy entry's implementation."""
        return self.target.partition(":")[0] if isinstance(self.target, str) else None

    @property
    def doc(self) -> str:
        """The first line of the declared summary, else of the implementation's docstring."""
        lines = (self.summary or getattr(self.obj, "__doc__", None) or "").strip().splitlines()
        return lines[0] if lines else ""


E = TypeVar("E", bound=Entry[Any])


class Registry(Generic[E]):
    """Names of one family mapped to their entries, of type `entry_type`.

    The `catalog` module (or modules), imported on first lookup, declares the built-in entries.
    """

    def __init__(
        self, family: str, entry_type: type[E], catalog: str | tuple[str, ...] = ()
    ) -> None:
        self.family = family
        self.entry_type = entry_type
        self._catalogs = (catalog,) if isinstance(catalog, str) else catalog
        self._entries: dict[str, E] = {}
        self._loaded = not self._catalogs

    def register(
        self,
        name: str,
        *,
        params: type[BaseModel] | None = None,
        kind: type[E] | None = None,
        **capabilities: Any,
    ) -> Callable[[T], T]:
        """Decorator: register `obj` under `name` now (a plugin's way); `params` is the schema
        of its suite fields and `capabilities` the typed fields of the family's entry type."""

        def decorator(obj: T) -> T:
            self.add(name, obj, params=params, kind=kind, **capabilities)
            return obj

        return decorator

    def add(self, name: str, target: Any, *, kind: type[E] | None = None, **fields: Any) -> None:
        """Add an entry: `target` is the object or its "module:attr" path (imported on first
        use); `kind` is the entry type when the family has several (default `entry_type`)."""
        if name in self._entries:
            raise RegistryError(f"{self.family} '{name}' is already registered")
        entry_type = kind or self.entry_type
        self._entries[name] = entry_type(name=name, family=self.family, target=target, **fields)

    declare = add

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            for catalog in self._catalogs:
                importlib.import_module(catalog)

    def entry(self, name: str) -> E:
        self._load()
        if name not in self._entries:
            raise UnknownNameError(self.family, name, self.names())
        return self._entries[name]

    def get(self, name: str) -> Any:
        """The implementation of `name` (`entry(name).obj`, typed by the entry)."""
        return self.entry(name).obj

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def entries(self) -> Iterator[E]:
        self._load()
        yield from (self._entries[name] for name in sorted(self._entries))

    def __contains__(self, name: object) -> bool:
        self._load()
        return isinstance(name, str) and name in self._entries

    @contextmanager
    def scoped(self) -> Iterator[Registry[E]]:
        """Within the block, entries may be added (a plugin tried once, a test's stand-in); on
        leaving it the registry holds again exactly the entries it held on entering."""
        self._load()
        saved = dict(self._entries)
        try:
            yield self
        finally:
            self._entries.clear()
            self._entries.update(saved)
