"""Suites a new user writes wrongly: every problem is located, exit 2, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import model_validator

from harness.spec import SuiteError, load_suite
from harness.spec.loader import Locator, validated
from harness.spec.sections import StrictModel
from tests.factories import invoke, write_suite


def problems_of(path: Path) -> list[str]:
    with pytest.raises(SuiteError) as caught:
        load_suite(path)
    return [str(problem) for problem in caught.value.problems]


def line_of(path: Path, text: str, nth: int = 1) -> int:
    lines = [i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    return lines[nth - 1]


def test_unknown_synthetic_kind_is_located_with_a_suggestion(tmp_path: Path) -> None:
    extra = "matrix: [{methods: [pre-ln], models: [gpt-2l], tasks: [div]}]\n"
    path = write_suite(tmp_path, "pre-ln: {}", extra=extra)
    text = path.read_text().replace(
        "tasks:\n", "tasks:\n  div: {type: synthetic, kind: modular-division}\n", 1
    )
    path.write_text(text)
    (problem,) = problems_of(path)
    assert problem == (
        f"{path}:{line_of(path, 'modular-division')}: tasks.div.kind: unknown synthetic task "
        "kind 'modular-division'; did you mean 'modular-addition'?"
    )
    result = invoke("validate", str(path))
    assert result.exit_code == 2
    assert "Traceback" not in result.output


class Fragile(StrictModel):
    x: int = 0

    @model_validator(mode="after")
    def _breaks(self) -> Fragile:
        raise KeyError("a validator's own bug")


def test_any_exception_in_a_validator_becomes_a_located_problem(tmp_path: Path) -> None:
    locator = Locator("s.yaml", None)
    locator.lines[("models", "m")] = 7
    model, problems = validated(Fragile, {"x": 1}, locator, ("models", "m"))
    assert model is None
    assert [str(p) for p in problems] == ['s.yaml:7: models.m: KeyError: "a validator\'s own bug"']


@pytest.mark.parametrize(
    ("method", "written", "message"),
    [
        (
            "q: {quantize: {scheme: torchao_int8, bits: 4}}",
            "bits: 4",
            "methods.q.quantize.bits: quantization scheme 'torchao_int8' supports bits [8], not 4",
        ),
        (
            "q: {quantize: {scheme: quanto, bits: 4, group_size: 16}}",
            "group_size",
            "methods.q.quantize.group_size: quantization scheme 'quanto' does not take "
            "group_size (a fixed layout or another scheme's option); drop it",
        ),
        (
            "q: {quantize: {scheme: rtn, bits: 4, layerwise: {high_bits: 8, low_bits: 3}}}",
            "low_bits",
            None,  # rtn has every width from 2 to 8: valid
        ),
        (
            "q: {quantize: {scheme: quanto, layerwise: {high_bits: 8, low_bits: 3}}}",
            "low_bits",
            "methods.q.quantize.layerwise.low_bits: quantization scheme 'quanto' supports bits "
            "[2, 4, 8], not 3",
        ),
        (
            "q: {quantize: {scheme: rtn, group_size: 24}}",
            "group_size",
            "methods.q.quantize.group_size: group_size 24 does not divide the model's Linear "
            "input widths 32, 88 (model 'gpt-2l')",
        ),
        (
            "p: {prune: {criterion: last_n, n: 5}}",
            "n: 5",
            "methods.p.prune.n: pruning must remove between 1 and 1 of 2 layers, not 5 "
            "(model 'gpt-2l')",
        ),
        (
            "p: {prune: {criterion: attention_qk, n: 1}}",
            "attention_qk",
            "methods.p.prune.target: pruning criterion 'attention_qk' supports target attention, "
            "not 'block'",
        ),
    ],
)
def test_validate_checks_what_post_training_would_refuse(
    tmp_path: Path, method: str, written: str, message: str | None
) -> None:
    path = write_suite(tmp_path, f"pre-ln: {{}}\n{method}")
    if message is None:
        load_suite(path)
        return
    assert problems_of(path) == [f"{path}:{line_of(path, written)}: {message}"]


def test_duplicate_key_is_an_error_at_the_second_key(tmp_path: Path) -> None:
    path = write_suite(tmp_path, "pre-ln: {}\nrms: {norm: {type: rmsnorm}}\nrms: {}")
    first, second = line_of(path, "rms:"), line_of(path, "rms:", 2)
    assert problems_of(path) == [
        f"{path}:{second}: methods.rms: duplicate key (first written at line {first})"
    ]


def test_python_tags_are_refused_with_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "evil.yaml"
    marker = tmp_path / "pwned"
    path.write_text(
        "suite: evil\n"
        f"description: !!python/object/apply:os.system ['touch {marker}']\n"
        "models: {}\n"
    )
    (problem,) = problems_of(path)
    assert problem.startswith(f"{path}:2: YAML tag refused")
    assert "yaml.safe_load" in problem
    result = invoke("validate", str(path))
    assert result.exit_code == 2
    assert not marker.exists()


def test_a_type_that_is_not_a_name_is_located(tmp_path: Path) -> None:
    """Found by the fuzzer: `type: {}` crashed the registry lookup with `unhashable type`."""
    path = write_suite(tmp_path, "pre-ln: {}")
    path.write_text(path.read_text().replace("{type: lm,", "{type: {},"))
    (problem,) = problems_of(path)
    assert problem.startswith(f"{path}:{line_of(path, 'type: {}')}: tasks.bytes.type: 'type' must")


def validate_fails(path: Path) -> str:
    """`layerbench validate PATH`: exit 2, no traceback; its output."""
    result = invoke("validate", str(path))
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    return result.output


def test_a_task_window_longer_than_the_model_context_is_located(tmp_path: Path) -> None:
    path = write_suite(tmp_path, "pre-ln: {}")
    path.write_text(path.read_text().replace("seq_len: 32}", "seq_len: 128}"))
    (problem,) = problems_of(path)
    assert problem == (
        f"{path}:{line_of(path, 'seq_len: 128')}: tasks.bytes.seq_len: 128 is longer than the "
        "max_seq_len of model 'gpt-2l' (64): lower seq_len or raise the model's max_seq_len"
    )
    assert "tasks.bytes.seq_len" in validate_fails(path)


def test_an_empty_sweep_list_is_located(tmp_path: Path) -> None:
    path = write_suite(tmp_path, "pre-ln: {}\nswept:\n  sweep: {optimizer.lr: []}")
    (problem,) = problems_of(path)
    assert problem == (
        f"{path}:{line_of(path, 'optimizer.lr')}: methods.swept.sweep.optimizer.lr: an empty "
        "list sweeps no value, so the method would have no trials"
    )
    assert "methods.swept.sweep" in validate_fails(path)


def alias_bomb(levels: int, references: int) -> str:
    """`levels` anchors, each a list of `references` aliases of the one before."""
    lines = ["suite: bomb", f"a0: &a0 [{', '.join(['x'] * references)}]"]
    for level in range(1, levels + 1):
        aliases = ", ".join([f"*a{level - 1}"] * references)
        lines.append(f"a{level}: &a{level} [{aliases}]")
    return "\n".join(lines) + "\nmodels: {}\n"


@pytest.mark.parametrize("text", [alias_bomb(8, 9), "suite: loop\nl: &l [1, *l]\n"])
def test_an_alias_bomb_is_refused_before_it_expands(tmp_path: Path, text: str) -> None:
    """9^8 (43 million) values: refused from the composed graph, where an alias is one node."""
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    (problem,) = problems_of(path)
    assert "YAML aliases expand this to more than 100,000 values" in problem
    assert problem.startswith(f"{path}:")
    assert "YAML aliases" in validate_fails(path)


def test_anchors_and_merge_keys_of_a_real_size_still_load(tmp_path: Path) -> None:
    path = write_suite(tmp_path, "pre-ln: &base {norm: {type: rmsnorm}}\nother: {<<: *base}")
    assert set(load_suite(path).methods) == {"pre-ln", "other"}
