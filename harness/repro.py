"""The `layerbench run` command lines that rerun one trial or one comparison (what the Trial page,
`layerbench rank --format json` and the nightly alerts print), built from `--only` filters
(`harness.spec.plan.select_trials`: fields combine, names of a field are alternatives)."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def only_filter(fields: Mapping[str, Sequence[Any]]) -> str:
    """`--only`'s value: `method=a,b,seed=0` (fields in the order given, empty ones left out)."""
    return ",".join(
        f"{field}=" + ",".join(str(name) for name in names)
        for field, names in fields.items()
        if names
    )


def run_command(suite_path: str, fields: Mapping[str, Sequence[Any]], db: str | None = None) -> str:
    """`layerbench run SUITE --only ... --force` (with `--db` when given), shell-quoted."""
    words = ["layerbench", "run", suite_path, "--only", only_filter(fields), "--force"]
    if db:
        words += ["--db", db]
    return shlex.join(words)


def rerun_trial(suite_path: str, trial: Mapping[str, Any], db: str | None = None) -> str:
    """The command that reruns exactly one trial (`method`, `model`, `task`, `seed`; a sweep
    point is named by its `key`, as the method's other points share the rest)."""
    fields: dict[str, list[Any]] = {
        name: [trial[name]] for name in ("method", "model", "task", "seed")
    }
    if trial.get("sweep"):
        fields["key"] = [trial["key"]]
    return run_command(suite_path, fields, db)


def rerun_comparison(
    suite_path: str,
    methods: Iterable[str],
    models: Iterable[str],
    tasks: Iterable[str],
    db: str | None = None,
) -> str:
    """The command that reruns every seed of `methods` on `models` x `tasks`."""
    fields = {
        "method": list(dict.fromkeys(methods)),
        "model": list(dict.fromkeys(models)),
        "task": list(dict.fromkeys(tasks)),
    }
    return run_command(suite_path, fields, db)
