"""`layerbench run --only FIELD=NAME[,NAME]`: exact names, one clear error for unknown ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.spec.plan import PlannedTrial, SelectionError, select_trials
from tests.factories import invoke

MODELS = ("gpt-12l", "gpt-12l-untied")


def trial(method: str, model: str, seed: int) -> PlannedTrial:
    key = f"{method}/{model}/{seed}"
    return PlannedTrial(key, "s", method, model, "lm", seed, {}, {})


PLAN = [trial(m, model, s) for m in ("pre-ln", "mix-ln") for model in MODELS for s in (0, 1)]


def models(trials: list[PlannedTrial]) -> set[str]:
    return {t.model for t in trials}


def test_only_matches_names_exactly() -> None:
    assert models(select_trials(PLAN, "model=gpt-12l")) == {"gpt-12l"}
    assert len(select_trials(PLAN, "model=gpt-12l")) == 4
    assert models(select_trials(PLAN, "model=gpt-12l-untied,gpt-12l")) == set(MODELS)
    assert {t.seed for t in select_trials(PLAN, "seed=1")} == {1}
    assert {t.method for t in select_trials(PLAN, "method=pre-ln")} == {"pre-ln"}


def test_only_combines_fields_and_names_one_trial_by_key() -> None:
    both = select_trials(PLAN, "method=pre-ln,mix-ln,seed=1,model=gpt-12l")
    assert {(t.method, t.seed, t.model) for t in both} == {
        ("pre-ln", 1, "gpt-12l"),
        ("mix-ln", 1, "gpt-12l"),
    }
    one = PLAN[3]
    assert select_trials(PLAN, f"method={one.method},key={one.key}") == [one]


@pytest.mark.parametrize(
    ("only", "message"),
    [
        ("model=gpt-12", "unknown model 'gpt-12' (did you mean 'gpt-12l'?)"),
        ("model=gpt-12l,gpt-untied", "unknown model 'gpt-untied' (did you mean 'gpt-12l-untied'?)"),
        ("method=zzz", "unknown method 'zzz'; this suite's methods: pre-ln, mix-ln"),
        ("seed=7", "unknown seed '7'"),
        ("models=gpt-12l", "--only expects FIELD=NAME[,NAME]"),
        ("model=", "--only expects FIELD=NAME[,NAME]"),
        ("model=gpt-12l,", "--only expects FIELD=NAME[,NAME]"),
        ("seed=1,seed=2", "--only expects FIELD=NAME[,NAME]"),
        ("method=pre-ln,seed=", "--only expects FIELD=NAME[,NAME]"),
    ],
)
def test_only_rejects_unknown_names_and_bad_filters(only: str, message: str) -> None:
    with pytest.raises(SelectionError) as error:
        select_trials(PLAN, only)
    assert message in str(error.value)


def test_run_with_an_unknown_only_name_exits_2_without_a_traceback(tiny_suite: Path) -> None:
    result = invoke("run", str(tiny_suite), "--only", "method=pre-lnn")
    assert result.exit_code == 2, result.output
    assert "unknown method 'pre-lnn' (did you mean" in result.output
    assert "Traceback" not in result.output
