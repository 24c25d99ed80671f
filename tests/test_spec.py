"""Suite validation: strict schema, located errors with suggestions, merging and sweeps."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.spec import SuiteError, load_suite
from harness.spec.plan import plan_suite
from tests.factories import ROOT, invoke


def problems_of(path: Path) -> list[str]:
    with pytest.raises(SuiteError) as caught:
        load_suite(path)
    return [str(problem) for problem in caught.value.problems]


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_unknown_key_names_file_line_path_and_suggestion(write_suite: Any, tmp_path: Path) -> None:
    path = write_suite(tmp_path, "pre-ln: {}\npost-ln: {norm: {placment: post}}")
    (problem,) = problems_of(path)
    assert problem == (
        f"{path}:{line_of(path, 'placment')}: methods.post-ln.norm.placment: "
        "unknown field; did you mean 'placement'?"
    )


def test_wrong_type_is_located(write_suite: Any, tmp_path: Path) -> None:
    path = write_suite(tmp_path, "pre-ln: {}\nslow: {train: {steps: many}}")
    (problem,) = problems_of(path)
    assert problem.startswith(f"{path}:{line_of(path, 'slow:')}: methods.slow.train.steps: ")
    assert "integer" in problem


def test_undefined_model_in_matrix(write_suite: Any, tmp_path: Path) -> None:
    extra = "matrix:\n  - {methods: [pre-ln], models: [gpt-3l], tasks: [bytes]}\n"
    path = write_suite(tmp_path, "pre-ln: {}", extra=extra)
    (problem,) = problems_of(path)
    assert problem == (
        f"{path}:{line_of(path, 'gpt-3l')}: matrix.0.models.0: "
        "'gpt-3l' is not defined in `models`; did you mean 'gpt-2l'?"
    )


def test_unknown_optimizer_is_located_where_written(write_suite: Any, tmp_path: Path) -> None:
    path = write_suite(tmp_path, "pre-ln: {}\nfancy: {optimizer: {name: adamww}}")
    (problem,) = problems_of(path)
    assert problem.startswith(f"{path}:{line_of(path, 'adamww')}: methods.fancy.optimizer.name: ")
    assert "unknown optimizer 'adamww'; did you mean 'adamw'?" in problem


def test_yaml_syntax_error_has_its_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("suite: x\nmodels:\n  a: {type: gpt\ntasks: {}\n")
    (problem,) = problems_of(path)
    assert problem.startswith(f"{path}:4: YAML syntax error")


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    (problem,) = problems_of(path)
    assert (
        problem == f"{path}:1: the file is empty; a suite needs at least `suite`, "
        "`models`, `tasks` and `methods`"
    )


def test_unknown_model_type_and_model_field(write_suite: Any, tmp_path: Path) -> None:
    path = write_suite(tmp_path, "pre-ln: {}")
    text = path.read_text().replace("n_heads: 2", "n_head: 2")
    path.write_text(text)
    (problem,) = problems_of(path)
    assert "models.gpt-2l.n_head: unknown field; did you mean 'n_heads'?" in problem


def test_sweep_must_name_a_real_field_with_valid_values(write_suite: Any, tmp_path: Path) -> None:
    path = write_suite(tmp_path, "pre-ln: {}\nswept: {sweep: {optimizer.lr: [0.1, -1]}}")
    (problem,) = problems_of(path)
    assert f":{line_of(path, 'swept')}: methods.swept.sweep.optimizer.lr:" in problem
    assert "greater than 0" in problem
    path = write_suite(tmp_path, "pre-ln: {}\nswept: {sweep: {train.stepz: [1, 2]}}")
    assert "'train.stepz' does not name a field" in problems_of(path)[0]


def test_extends_merges_defaults_method_and_ancestor(write_suite: Any, tmp_path: Path) -> None:
    methods = """
pre-ln: {}
post-ln: {norm: {placement: post}, optimizer: {lr: 1.0e-3}}
post-rms: {extends: post-ln, norm: {type: rmsnorm}}
"""
    suite = load_suite(write_suite(tmp_path, methods))
    trial = next(t for t in plan_suite(suite) if t.method == "post-rms")
    assert trial.config["norm"]["placement"] == "post"
    assert trial.config["norm"]["type"] == "rmsnorm"
    assert trial.config["optimizer"]["lr"] == 1.0e-3
    assert trial.config["optimizer"]["name"] == "adamw"
    assert trial.config["train"]["steps"] == 20


def test_sweep_expands_a_grid_with_distinct_keys(write_suite: Any, tmp_path: Path) -> None:
    methods = "pre-ln: {sweep: {optimizer.lr: [1.0e-3, 3.0e-3, 1.0e-2]}}"
    trials = plan_suite(load_suite(write_suite(tmp_path, methods)))
    assert len(trials) == 3 * 2
    assert sorted({t.config["optimizer"]["lr"] for t in trials}) == [1.0e-3, 3.0e-3, 1.0e-2]
    assert len({t.key for t in trials}) == 6


def test_a_method_sets_model_fields_in_its_own_trials_only(
    write_suite: Any, tmp_path: Path
) -> None:
    methods = "pre-ln: {}\npre-ln-unscaled: {model: {init: unscaled, init_std: 0.05}}"
    trials = plan_suite(load_suite(write_suite(tmp_path, methods)))
    inits = {(t.method, t.config["model"]["init"], t.config["model"]["init_std"]) for t in trials}
    assert inits == {("pre-ln", "gpt2", 0.02), ("pre-ln-unscaled", "unscaled", 0.05)}
    alone = plan_suite(load_suite(write_suite(tmp_path, "pre-ln: {}")))
    assert {t.key for t in alone} <= {t.key for t in trials}  # others' keys do not move
    assert all(t.config["model"]["n_layers"] == 2 for t in trials)


def test_a_model_field_a_model_cannot_take_is_located(write_suite: Any, tmp_path: Path) -> None:
    path = write_suite(tmp_path, "pre-ln: {}\nodd: {model: {init: odd}}")
    (problem,) = problems_of(path)
    assert f":{line_of(path, 'odd:')}: methods.odd.model:" in problem
    assert "model.init:" in problem and "(in model 'gpt-2l')" in problem


def test_trial_key_is_stable_and_changes_with_config(write_suite: Any, tmp_path: Path) -> None:
    first = plan_suite(load_suite(write_suite(tmp_path, "pre-ln: {}")))
    again = plan_suite(load_suite(write_suite(tmp_path, "pre-ln: {}")))
    changed = plan_suite(load_suite(write_suite(tmp_path, "pre-ln: {optimizer: {lr: 0.1}}")))
    assert [t.key for t in first] == [t.key for t in again]
    assert not {t.key for t in first} & {t.key for t in changed}


def test_the_suite_sets_a_trials_threads_and_only_a_count_other_than_1_enters_its_key(
    write_suite: Any, tmp_path: Path
) -> None:
    def planned(cpus: str) -> tuple[list[str], list[int | None]]:
        extra = f"resources: {{cpus: {cpus}}}" if cpus else ""
        trials = plan_suite(load_suite(write_suite(tmp_path, "pre-ln: {}", extra=extra)))
        return [t.key for t in trials], [t.config.get("threads") for t in trials]

    unset, one, part = planned(""), planned("1"), planned("0.5")  # Ray may give part of a CPU
    two, more = planned("2"), planned("2.9")
    assert unset == one == part  # no `threads` in the config: the keys stored before it existed
    assert unset[1] == [None, None]
    assert two == more and two[1] == [2, 2]  # whole CPUs
    assert not set(two[0]) & set(unset[0])


@pytest.mark.parametrize(
    ("methods", "expected"),
    [
        ("pre-ln: {}\npost-ln: {norm: {placment: post}}", "did you mean 'placement'?"),
        ("pre-ln: {}\nfancy: {optimizer: {name: adamww}}", "did you mean 'adamw'?"),
    ],
)
def test_cli_exit_code_2_without_traceback(
    write_suite: Any, tmp_path: Path, methods: str, expected: str
) -> None:
    path = write_suite(tmp_path, methods)
    result = invoke("validate", str(path))
    assert result.exit_code == 2
    assert expected in result.output
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_real_process_prints_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "harness", "validate", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip().startswith(f"error: {path}:1: the file is empty")
    assert "Traceback" not in done.stderr + done.stdout


def test_shipped_suites_are_valid() -> None:
    for path in sorted((ROOT / "suites").glob("*.yaml")):
        assert plan_suite(load_suite(path)), path
