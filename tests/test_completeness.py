"""What is registered is documented and tested: the lists here come from the registries, so a new
entry needs no edit of a test, only its README row (docs/extending.md)."""

from __future__ import annotations

import re

import pytest

from harness.registry import FAMILIES, FAMILY_TABLE
from tests.factories import ROOT

README_ROW = {family.key: family.readme for family in FAMILY_TABLE if family.readme}
"""The row of README's "What is built" table that names each family's entries (the family
table's `readme`); metrics are described in the registry itself (`layerbench methods`)."""


def built_in(family: str) -> list[str]:
    """The family's entries that the harness declares (not those a suite's plugin registered)."""
    return [
        entry.name
        for entry in FAMILIES[family].entries()
        if (entry.module or getattr(entry.target, "__module__", "")).startswith("harness.")
    ]


def readme_rows() -> dict[str, str]:
    """The "What is built" table: each row's first cell (before any parenthesis) -> its names."""
    table = ROOT.joinpath("README.md").read_text().split("## What is built", 1)[1].strip()
    rows = {}
    for line in table.split("\n\n", 1)[0].splitlines()[2:]:
        family, names = line.strip("|").split("|", 1)
        rows[family.split("(")[0].strip()] = names
    return rows


def test_every_family_but_metrics_has_a_readme_row() -> None:
    assert set(FAMILIES) - set(README_ROW) == {"metric"}
    assert all(built_in(family) for family in README_ROW)
    assert set(README_ROW.values()) <= set(readme_rows())


@pytest.mark.parametrize("family", sorted(README_ROW))
def test_every_registered_name_is_in_its_readme_row(family: str) -> None:
    row = readme_rows()[README_ROW[family]]
    missing = [
        name
        for name in built_in(family)
        if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", row, re.IGNORECASE)
    ]
    assert not missing, f"README's '{README_ROW[family]}' row does not name {missing}"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_lazy_entries_resolve_to_their_implementation(family: str) -> None:
    for entry in FAMILIES[family].entries():
        assert entry.obj is not None and entry.doc, entry.name
