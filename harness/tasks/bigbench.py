"""BIG-bench multiple-choice tasks from the `bigbench` sdist on PyPI, for local lm-eval tasks.

`layerbench data install bigbench` downloads the sdist once and extracts only the chosen
`task.json` files into the LayerBench cache; the task YAMLs in `suites/tasks/` read them
through `load_task` (lm-eval's `custom_dataset`).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from harness.cache import DataMissingError, cache_dir

SDIST = "bigbench==1.0.0"
INSTALL = "layerbench data install bigbench"
DEFAULT_TASKS = ("hyperbaton", "navigate", "sports_understanding", "disambiguation_qa", "snarks")


def data_dir() -> Path:
    return cache_dir() / "bigbench"


def task_file(task: str) -> Path:
    return data_dir() / task / "task.json"


def data_digest() -> str:
    """A fingerprint of the installed BIG-bench tasks (names and sizes)."""
    files = sorted(data_dir().glob("*/task.json")) if data_dir().is_dir() else []
    listing = "".join(f"{path.parent.name}:{path.stat().st_size};" for path in files)
    return hashlib.sha256(listing.encode()).hexdigest()


def install(tasks: tuple[str, ...] = DEFAULT_TASKS) -> list[Path]:
    """Download the sdist (pip, PyPI) and extract the tasks' `task.json` into the cache."""
    with tempfile.TemporaryDirectory() as download:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                SDIST,
                "-d",
                download,
            ],
            check=True,
        )
        sdist = next(Path(download).glob("bigbench-*.tar.gz"))
        return extract(sdist, tasks)


def extract(sdist: Path, tasks: tuple[str, ...]) -> list[Path]:
    """Copy `bigbench/benchmark_tasks/<task>/task.json` of each task out of the sdist."""
    wanted = {f"bigbench/benchmark_tasks/{task}/task.json": task for task in tasks}
    written = []
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            inner = member.name.split("/", 1)[-1]
            source = archive.extractfile(member) if inner in wanted else None
            if source is not None:  # a wanted regular file
                target = task_file(wanted.pop(inner))
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(source.read())
                written.append(target)
    if wanted:
        raise DataMissingError(f"not in {sdist.name}: {', '.join(sorted(wanted.values()))}")
    return written


def require(task: str) -> Path:
    """The installed file of a BIG-bench task; DataMissingError naming the install command if
    it is not installed."""
    path = task_file(task)
    if not path.is_file():
        raise DataMissingError(
            f"BIG-bench task '{task}' is not installed: run `{INSTALL}` (it downloads the "
            f"`bigbench` sdist from PyPI once and extracts the chosen tasks into {data_dir()})"
        )
    return path


def examples(task: str) -> list[dict[str, Any]]:
    """The task's multiple-choice examples as {input, choices, target} rows.

    The prompt follows BIG-bench's JSON-task defaults: the task prefix, then `Q: <input>`
    and `A:`; the choices are the keys of `target_scores`, the target the highest scored.
    """
    spec = json.loads(require(task).read_text(encoding="utf-8"))
    prefix = spec.get("task_prefix", "")
    rows = []
    for example in spec["examples"]:
        scores = example["target_scores"]
        choices = list(scores)
        rows.append(
            {
                "input": f"{prefix}Q: {example['input']}\nA:",
                "choices": choices,
                "target": max(range(len(choices)), key=lambda i: scores[choices[i]]),
            }
        )
    return rows


def load_task(task: str, **_metadata: Any) -> Any:
    """lm-eval `custom_dataset`: the task's examples as a `test` split."""
    from datasets import Dataset, DatasetDict

    return DatasetDict({"test": Dataset.from_list(examples(task))})
