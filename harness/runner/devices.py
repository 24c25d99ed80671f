"""Where a trial runs and at which precision: its torch device and its autocast context."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device '{name}' was asked for but CUDA is not available here")
    return torch.device(name)


def autocast(device: torch.device, precision: str) -> AbstractContextManager[Any]:
    """Mixed precision by autocast; fp32 runs as is."""
    if precision == "fp32":
        return nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)
