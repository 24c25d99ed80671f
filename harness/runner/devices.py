"""A trial's device, resolved in the process that runs it, its autocast context, and what its
stored environment says.

`device: auto` becomes CUDA or the CPU where the trial runs (the local machine, a Slurm job, a
Ray worker), never where the suite was planned; the stored environment records what it became
(`device`, `device_name`, and `device_count`, `peak_flops` from `harness.runner.cost`). The
trial's key does not depend on it: a key hashes the config, which holds `device` as written.

A trial that asks for CUDA where there is none fails with one sentence (`DeviceUnavailableError`,
stored as the trial's error without a traceback): what a Slurm job or Ray worker without a GPU
reports for each trial. The local backend refuses such a suite before any trial starts
(`harness.spec.devices`).
"""

from __future__ import annotations

import os
import platform
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import torch

from harness.env import cpu_model, git_commit, package_versions
from harness.spec.plan import trial_versions
from harness.spec.recipe import TrialRecipe


class DeviceUnavailableError(RuntimeError):
    """The trial asks for a device this machine does not have."""


def resolve_device(name: str) -> torch.device:
    """The torch device of a suite's `device` here; raises `DeviceUnavailableError`."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise DeviceUnavailableError(
            f"device '{name}' was asked for but no CUDA device is reachable on "
            f"{platform.node()}; set `device: auto` or `device: cpu` in the suite, or run it "
            "where its workers have GPUs (resources.gpus)"
        )
    return torch.device(name)


def autocast(device: torch.device, precision: str) -> AbstractContextManager[Any]:
    """Mixed precision by autocast; fp32 runs as is."""
    if precision == "fp32":
        return nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def environment(device: torch.device, recipe: TrialRecipe) -> dict[str, Any]:
    """What a result depends on besides its config (`method_versions`: the entry and method
    library versions in its key, so `layerbench status` can say which one superseded it)."""
    return {
        **{f"{name}_version": value for name, value in package_versions().items()},
        "method_versions": trial_versions(recipe),
        "python": platform.python_version(),
        "git_commit": git_commit(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model(),
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "niceness": os.nice(0),  # a lower priority slows every step beside other work
        "host": platform.node(),
        "numpy_version": np.__version__,
        "precision": recipe.precision,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
