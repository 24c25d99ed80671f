"""Facts about the software and machine a trial ran on, and where results are tracked
(cheap: no torch import)."""

from __future__ import annotations

import os
import platform
import subprocess
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

CUDA_DRIVER = Path("/proc/driver/nvidia/gpus")
RESULT_CHANGING_PACKAGES = ("layerbench", "torch", "transformers", "lm-eval")
DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
METHOD_LIBRARIES = {
    "pytorch-optimizer": "4.1.0",
    "torchao": "0.18.0",
    "optimum-quanto": "0.2.7",
    "hqq": "0.2.8.post1",
}
"""The libraries that implement some methods, at the versions every stored trial until entry
versions existed ran with (the baseline): a trial key names a method library only when its
installed version differs, so those trials' keys are unchanged (`method_library_versions`)."""


@cache
def package_versions() -> dict[str, str]:
    """Versions of the packages whose upgrade can change a trial's numbers."""
    return {package: installed_version(package) for package in RESULT_CHANGING_PACKAGES}


def installed_version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "absent"


@cache
def method_library_versions() -> dict[str, str]:
    """The installed method libraries (METHOD_LIBRARIES) whose version is not the baseline."""
    found = {name: installed_version(name) for name in METHOD_LIBRARIES}
    return {name: found[name] for name in METHOD_LIBRARIES if found[name] != METHOD_LIBRARIES[name]}


@cache
def git_commit() -> str | None:
    """The commit of the working directory's repository, if any."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


@cache
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def tracking_uri(uri: str | None = None) -> str:
    """The MLflow tracking URI: `uri`, else $MLFLOW_TRACKING_URI, else a local SQLite file."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


@cache
def cuda_available() -> bool:
    """Whether `device: auto` will find a CUDA GPU, answered without importing torch: an NVIDIA
    driver lists a GPU, CUDA_VISIBLE_DEVICES does not hide them all, and torch is a CUDA build."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    has_gpu = CUDA_DRIVER.is_dir() and any(CUDA_DRIVER.iterdir())
    return has_gpu and "+cpu" not in package_versions().get("torch", "+cpu")
