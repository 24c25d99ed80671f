"""docs/extending.md's worked example, followed as written: its norm's two code blocks are run
on a scratch copy of the norm registry (the implementation block as a module standing in for
harness/methods/norms.py, the catalog block in harness/methods/catalog.py's namespace), so the
page and this test cannot drift. The norm validates in a suite, matches its formula, trains for
2 steps, and the version lock and the README check ask for the steps the page lists."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import harness.methods.catalog as catalog
import harness.methods.norms as norms
from harness.registry import NORM_TYPES, NormTypeEntry
from harness.runner import sources
from harness.runner.trial import run_trial
from harness.spec import SuiteError, load_suite
from harness.spec.json_schema import suite_json_schema
from harness.spec.plan import plan_suite
from tests.factories import ROOT, invoke, write_suite
from tests.test_completeness import readme_rows

PAGE = ROOT / "docs" / "extending.md"
SECTION = "A norm type"
STAND_IN = "harness.methods.norms_example"
"""The module the implementation block runs in (implementation packages' code is digested by
module, so it is named under harness.methods)."""


def section_blocks(title: str) -> dict[str, str]:
    """The python code blocks of the page's section `title`, by the file their first line
    (`# harness/...`) names."""
    section = PAGE.read_text().split(f"\n## {title}", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    return {block.splitlines()[0].removeprefix("# "): block for block in blocks}


def run_implementation(block: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the implementation block in a module with norms.py's namespace, from a file (so its
    source can be digested), and add what it defines to harness.methods.norms for this test."""
    path = folder / "norms_example.py"
    path.write_text(block)
    spec = importlib.util.spec_from_file_location(STAND_IN, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update({k: v for k, v in vars(norms).items() if not k.startswith("__")})
    monkeypatch.setitem(sys.modules, STAND_IN, module)
    spec.loader.exec_module(module)
    for name, value in vars(module).items():
        if getattr(value, "__module__", None) == STAND_IN:
            monkeypatch.setattr(norms, name, value, raising=False)


@pytest.fixture
def example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NormTypeEntry]:
    """The page's norm, declared as the page declares it, for this test only."""
    blocks = section_blocks(SECTION)
    assert set(blocks) == {"harness/methods/norms.py", "harness/methods/catalog.py"}
    run_implementation(blocks["harness/methods/norms.py"], tmp_path, monkeypatch)
    with NORM_TYPES.scoped():
        before = set(NORM_TYPES.names())
        exec(blocks["harness/methods/catalog.py"], dict(vars(catalog)))
        (name,) = set(NORM_TYPES.names()) - before
        yield NORM_TYPES.entry(name)
    assert name not in NORM_TYPES


def params_of(entry: NormTypeEntry) -> dict[str, Any]:
    """The suite fields of the page's example (`norm: {type: NAME, FIELD: VALUE}`)."""
    text = PAGE.read_text().split(f"\n## {SECTION}", 1)[1]
    written = re.search(rf"`norm: \{{type: {entry.name}, (\w+): ([\d.]+)\}}`", text)
    assert written, "the page shows the suite line that uses the norm"
    return {written[1]: float(written[2])}


def test_the_documented_norm_follows_its_formula(example: NormTypeEntry) -> None:
    params = params_of(example)
    module = example.obj(8, "attn", eps=1e-5, **params)
    x = torch.randn(3, 5, 8)
    gain = next(iter(params.values()))
    torch.testing.assert_close(module(x), (x - x.mean(dim=-1, keepdim=True)) * gain)
    assert example.doc.startswith("Mean-only normalization") and "2016" in example.doc


def test_the_documented_norm_validates_and_trains_two_steps(
    example: NormTypeEntry, tmp_path: Path
) -> None:
    fields = ", ".join(f"{key}: {value}" for key, value in params_of(example).items())
    methods = f"pre-ln: {{}}\nmine: {{norm: {{type: {example.name}, {fields}}}}}"
    suite = load_suite(write_suite(tmp_path, methods, steps=2, eval_every=2))
    trial = next(t for t in plan_suite(suite) if t.method == "mine")
    result = run_trial(trial.config)
    assert result.status == "done", result.error
    typo = f"mine: {{norm: {{type: {example.name}, {fields.replace('_', '', 1)}}}}}"
    with pytest.raises(SuiteError, match="did you mean"):
        load_suite(write_suite(tmp_path, f"pre-ln: {{}}\n{typo}"))


def test_the_steps_the_page_lists_are_the_ones_the_checks_ask_for(
    example: NormTypeEntry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`layerbench versions` asks for `--update`, which records the norm (in a copy of the
    lock); the README check wants the name in the "norm type" row; `layerbench schema`
    describes its fields unasked."""
    lock = tmp_path / "entry_sources.json"
    lock.write_text(sources.LOCK.read_text())
    monkeypatch.setattr(sources, "LOCK", lock)
    monkeypatch.setattr(sources, "read_lock", lambda: json.loads(lock.read_text()))
    key = f"norm.type:{example.name}"
    checked = invoke("versions")
    assert checked.exit_code == 2
    assert f"{key} is not recorded: run `layerbench versions --update`" in checked.output
    updated = invoke("versions", "--update")
    assert updated.exit_code == 0 and key in updated.output, updated.output
    assert json.loads(lock.read_text())[key]["version"] == 1 and sources.check() == []
    page = PAGE.read_text()
    assert "layerbench versions --update" in page and "entry_sources.json" in page
    assert example.name not in readme_rows()["norm type"] and '"norm type" row' in page
    assert example.params is not None
    assert all(field.description for field in example.params.model_fields.values())
    rules = suite_json_schema()["$defs"]["NormSpec"]["allOf"]
    names = [rule["if"]["properties"].get("type") for rule in rules]
    branch = rules[names.index({"const": example.name})]
    assert set(branch["then"]["properties"]) == set(example.params.model_fields)
