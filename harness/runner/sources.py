"""The recorded source of each built-in entry: a method's code cannot change unversioned.

An entry's *source digest* (`harness.spec.digest`) hashes its implementation and every function
and class of the implementation packages (methods, models, tasks, data, diagnostics, utils) it
reaches by name, as syntax trees without docstrings (comments and formatting do not count,
helpers do).
The digests and the versions they were recorded at live in `entry_sources.json`, beside this module:
`layerbench versions --check` (and tests/test_versions.py) fail when a digest changed while the
version stayed, so a change that can move results bumps the entry's `version` in its catalog,
which changes the keys of the trials that use it (`harness.spec.plan.trial_key`) and supersedes
their stored results. A change that cannot move results (a rename, a refactor) is recorded as
such with `layerbench versions --update --same-results FAMILY:NAME`.

The digests import the implementations (torch and the method libraries), so they are computed by
that command and the test, never when a suite is planned.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.lazy_registry import Entry
from harness.logs import detach_stream_handlers
from harness.registry import FAMILY_TABLE
from harness.spec.digest import Parsed, source_of

LOCK = Path(__file__).with_name("entry_sources.json")


def built_in_entries() -> dict[str, Entry[Any]]:
    """Every entry declared by a catalog (a "module:attr" target) of a family that trial
    configs name (metrics have no code), by "FAMILY:NAME" as trial keys name them
    (`harness.spec.plan.used_entries`)."""
    return {
        f"{family.key}:{entry.name}": entry
        for family in FAMILY_TABLE
        if family.config_path is not None
        for entry in family.registry.entries()
        if entry.module
    }


def read_lock(path: Path = LOCK) -> dict[str, dict[str, Any]]:
    return json.loads(path.read_text()) if path.is_file() else {}


def current(entries: dict[str, Entry[Any]]) -> dict[str, dict[str, Any]]:
    """Each entry's version and source digest, as `entry_sources.json` records them."""
    import torch  # noqa: F401 (first: its terminal log handler is moved aside before the rest)

    detach_stream_handlers()
    parsed: dict[str, Parsed] = {}
    return {
        key: {"version": entry.version, "source": source_of(entry.obj, parsed).digest}
        for key, entry in entries.items()
    }


def unversioned(now: dict[str, dict[str, Any]], lock: dict[str, dict[str, Any]]) -> list[str]:
    """The entries whose source changed since the lock while their version stayed."""
    return [
        key
        for key, entry in sorted(now.items())
        if key in lock
        and entry["source"] != lock[key]["source"]
        and entry["version"] == lock[key]["version"]
    ]


def problems(
    now: dict[str, dict[str, Any]], lock: dict[str, dict[str, Any]], catalog: dict[str, str]
) -> list[str]:
    """What is wrong between the entries `now` and the `lock`: a source changed at the same
    version (bump it in its `catalog` file) or a version or entry the lock does not record."""
    bump = set(unversioned(now, lock))
    found = []
    for key, entry in sorted(now.items()):
        if key in bump:
            found.append(
                f"{key}: its code changed but its version is still {entry['version']}: bump "
                f"`version=` in {catalog[key]} (or, if no result can change, run `layerbench "
                f"versions --update --same-results {key}`)"
            )
        elif key not in lock:
            found.append(f"{key} is not recorded: run `layerbench versions --update`")
        elif entry != lock[key]:
            found.append(
                f"{key} is now version {entry['version']}: run `layerbench versions --update`"
            )
    found += [f"{key} is recorded but no longer declared" for key in sorted(set(lock) - set(now))]
    return found


def catalogs(entries: dict[str, Entry[Any]]) -> dict[str, str]:
    """Where each entry is declared (its family's catalog module, as a file)."""
    return {
        key: (entry.module or "").rsplit(".", 1)[0].replace(".", "/") + "/catalog.py"
        for key, entry in entries.items()
    }


def check() -> list[str]:
    """The problems of the built-in entries against the committed `entry_sources.json`."""
    entries = built_in_entries()
    return problems(current(entries), read_lock(), catalogs(entries))


class UnversionedChangeError(ValueError):
    """A source changed at the same version and was not declared result-neutral."""


def update(same_results: Iterable[str] = ()) -> list[str]:
    """Record the current digests and versions; refuses (UnversionedChangeError) while a changed
    entry keeps its version, unless it is named in `same_results`. Returns what changed."""
    entries = built_in_entries()
    now, lock = current(entries), read_lock()
    allowed = set(same_results)
    unknown = allowed - set(now)
    if unknown:
        raise UnversionedChangeError(f"--same-results names no entry: {', '.join(sorted(unknown))}")
    blocked = [key for key in unversioned(now, lock) if key not in allowed]
    if blocked:
        catalog = catalogs(entries)
        raise UnversionedChangeError(
            "code changed without a version bump: "
            + "; ".join(f"{key} (bump `version=` in {catalog[key]})" for key in blocked)
            + "; or name each with --same-results if no result can change"
        )
    changed = [key for key in sorted(set(now) | set(lock)) if now.get(key) != lock.get(key)]
    LOCK.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
    return changed
