"""Plugins: methods registered by code outside LayerBench, and where each entry comes from.

A plugin is a module that registers entries when imported (`Registry.register`). A suite names
its own in `plugins:`; an installed package declares its modules in the entry-point group
`layerbench.plugins` (pyproject: `[project.entry-points."layerbench.plugins"] NAME = "module"`),
and they are imported wherever suites are loaded or trials run, without being listed.

A plugin entry's source digest (`harness.spec.digest`: its implementation and the helpers of its
package and of LayerBench it reaches) enters the key of every trial that uses it
(`harness.spec.plan.trial_versions`), so editing a plugin reruns exactly its trials.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from harness.lazy_registry import Entry
from harness.spec.digest import IMPLEMENTATION_PACKAGES, source_of

ENTRY_POINT_GROUP = "layerbench.plugins"
BUILT_IN = "harness."


@dataclass(frozen=True)
class InstalledPlugin:
    """One entry point of the group: the module it names and the package that declares it."""

    name: str
    module: str
    package: str
    version: str


class PluginImportError(ImportError):
    """An installed plugin package whose entry point cannot be imported."""


class PluginSourceError(ValueError):
    """A plugin entry whose source cannot be read, so it cannot enter a trial's key."""


@cache
def discovered() -> tuple[tuple[InstalledPlugin, ...], tuple[str, ...]]:
    """Import every installed plugin once: those imported, and a message per failure."""
    found, failures = [], []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        dist = point.dist
        package, version = (dist.name, dist.version) if dist else ("(unknown package)", "")
        try:
            point.load()
        except Exception as error:  # a plugin's import may raise anything: say which package
            failures.append(
                f"installed plugin package '{package}' {version} cannot be imported (entry point "
                f"'{point.name} = {point.value}' of group {ENTRY_POINT_GROUP}): "
                f"{type(error).__name__}: {error}; fix it or `pip uninstall {package}`"
            )
        else:
            found.append(InstalledPlugin(point.name, point.module, package, version))
    return tuple(found), tuple(failures)


def installed_plugins() -> tuple[InstalledPlugin, ...]:
    """The installed plugins, imported; PluginImportError naming the package if one fails."""
    found, failures = discovered()
    if failures:
        raise PluginImportError("; ".join(failures))
    return found


def implementation_module(entry: Entry[Any]) -> str:
    """The module that implements an entry (without importing a lazy built-in's)."""
    return entry.module or str(getattr(entry.obj, "__module__", ""))


def is_plugin(entry: Entry[Any]) -> bool:
    return not implementation_module(entry).startswith(BUILT_IN)


def plugin_entries() -> list[tuple[str, Entry[Any]]]:
    """Every plugin entry registered so far with its family's key, in the families' order."""
    from harness.registry import FAMILY_TABLE

    return [
        (family.key, entry)
        for family in FAMILY_TABLE
        if family.config_path is not None
        for entry in family.registry.entries()
        if is_plugin(entry)
    ]


def origin(entry: Entry[Any]) -> str:
    """Where an entry comes from: built-in, a plugin module, or an installed package's."""
    module = implementation_module(entry)
    if not is_plugin(entry):
        return "built-in"
    found, _ = discovered()
    for plugin in found:
        if module == plugin.module or module.startswith(plugin.module + "."):
            return f"plugin {module} (package {plugin.package} {plugin.version})"
    return f"plugin {module}"


def plugin_digest(entry: Entry[Any]) -> str:
    """The source digest of a plugin entry: its implementation and the helpers it reaches in
    its own top-level package and in LayerBench's implementation packages."""
    module = implementation_module(entry)
    packages = (module.partition(".")[0] + ".", *IMPLEMENTATION_PACKAGES)
    try:
        return source_of(entry.obj, packages=packages).digest
    # No source file (code typed into an interpreter), or no function or class to read (a
    # `functools.partial`, a callable instance).
    except (OSError, TypeError, AttributeError) as error:
        raise PluginSourceError(
            f"plugin entry '{entry.name}' of {module} has no readable source ({error}): register "
            "a function or class defined in a module file, so that its source can version its "
            "trials"
        ) from None
