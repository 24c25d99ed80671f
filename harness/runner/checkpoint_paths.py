"""Where a trial's checkpoints live (`harness.runner.checkpoint` writes them), without torch: the
runner, which never imports torch, removes a trial's checkpoints once its result is stored."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from harness.cache import cache_dir
from harness.records import PlannedTrial, TrialResult

CHECKPOINTS_ENV = "LAYERBENCH_CHECKPOINTS"


def checkpoint_root() -> Path:
    """`$LAYERBENCH_CHECKPOINTS`, else the cache's `checkpoints/` (a shared file system on a
    cluster, so a requeued job on another node finds its trial's checkpoints)."""
    return Path(os.environ.get(CHECKPOINTS_ENV) or cache_dir() / "checkpoints")


def trial_folder(key: str) -> Path:
    return checkpoint_root() / key


def last_checkpoint_step(key: str) -> int | None:
    """The step of a trial's newest checkpoint file (None: it has none)."""
    files = sorted(trial_folder(key).glob("step-*.pt"))
    return int(files[-1].stem.removeprefix("step-")) if files else None


def discard_checkpoints(trial: PlannedTrial, result: TrialResult) -> None:
    """Remove a trial's checkpoints once its result is stored, unless it is to be run again
    (`--retry-failed` resumes it) or its suite keeps the final one (`keep_final`)."""
    spec = trial.recipe.train.checkpoint
    if result.status.retried or (spec is not None and spec.keep_final):
        return
    shutil.rmtree(trial_folder(trial.key), ignore_errors=True)
