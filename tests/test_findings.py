"""Findings: `expect` claims in a suite, and their verdicts (reproduced, contradicted,
inconclusive, fragile) from constructed outcomes."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.spec import SuiteError, load_suite
from tests.conftest import ROOT, write_suite

runner = CliRunner()
METHODS = "pre-ln: {}\npost-ln: {norm: {placement: post}}"


def claims_suite(tmp_path: Path, expect: str) -> Path:
    return write_suite(tmp_path, METHODS, extra=f"expect:\n{expect}")


def problems_of(path: Path) -> list[str]:
    with pytest.raises(SuiteError) as caught:
        load_suite(path)
    return [str(problem) for problem in caught.value.problems]


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_claim_than_defaults_to_the_baseline(tmp_path: Path) -> None:
    path = claims_suite(
        tmp_path, "  - {method: post-ln, direction: worse, source: arXiv:2002.04745}\n"
    )
    (claim,) = load_suite(path).expect
    assert (claim.method, claim.than, claim.direction) == ("post-ln", None, "worse")


def test_unknown_claim_method_is_located_with_a_suggestion(tmp_path: Path) -> None:
    path = claims_suite(tmp_path, "  - {method: post-lm, direction: worse, source: x}\n")
    (problem,) = problems_of(path)
    assert problem == (
        f"{path}:{line_of(path, 'post-lm')}: expect.0.method: "
        "unknown method 'post-lm'; did you mean 'post-ln'?"
    )
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert "unknown method 'post-lm'" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("claim", "expected"),
    [
        ("{method: post-ln, direction: tie, source: x}", "a `tie` needs a `margin`"),
        ("{method: post-ln, direction: worse, margin: 0.1, source: x}", "only for direction `tie`"),
        ("{method: post-ln, direction: worst, source: x}", "expect.0.direction"),
        (
            "{method: post-ln, direction: worse, source: x, metric: val_los}",
            "did you mean 'val_loss'",
        ),
        (
            "{method: post-ln, direction: worse, source: x, recipes: [gpt-3l]}",
            "did you mean 'gpt-2l'",
        ),
        ("{method: pre-ln, direction: worse, source: x}", "compared with itself"),
        ("{method: post-ln, direction: worse}", "expect.0.source"),
    ],
)
def test_invalid_claims_are_located(tmp_path: Path, claim: str, expected: str) -> None:
    path = claims_suite(tmp_path, f"  - {claim}\n")
    (problem,) = problems_of(path)
    assert problem.startswith(f"{path}:{line_of(path, '- {method')}: expect.0")
    assert expected in problem


def test_a_recipe_where_the_methods_never_meet_is_an_error(tmp_path: Path) -> None:
    extra = (
        "matrix:\n  - {methods: [pre-ln], models: [gpt-2l], tasks: [bytes]}\n"
        "  - {methods: [post-ln], models: [gpt-2l-untied], tasks: [bytes]}\n"
        "expect:\n  - {method: post-ln, direction: worse, source: x, recipes: [gpt-2l-untied]}\n"
    )
    path = write_suite(tmp_path, METHODS, extra=extra)
    text = path.read_text().replace(
        "models:\n",
        "models:\n  gpt-2l-untied: {type: gpt, n_layers: 2, d_model: 32, n_heads: 2, "
        "max_seq_len: 64, tie_embeddings: false}\n",
        1,
    )
    path.write_text(text)
    (problem,) = problems_of(path)
    assert "never both run on model 'gpt-2l-untied'" in problem


def test_shipped_findings_suites_are_valid() -> None:
    paths = sorted((ROOT / "suites" / "findings").glob("*.yaml"))
    assert len(paths) == 9
    result = runner.invoke(app, ["validate", *map(str, paths)])
    assert result.exit_code == 0, result.output
    for path in paths:
        suite = load_suite(path)
        assert len(suite.seeds) >= 5 and suite.expect, path
