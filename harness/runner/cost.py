"""What a training trial cost: peak memory, model FLOPs per token and MFU, and its devices.

- Peak memory: CUDA's `max_memory_allocated` on a GPU (the trial process is fresh, so the peak
  is the trial's own); on the CPU the process's peak resident set size (`getrusage`), which
  counts the libraries it maps as well as the tensors it allocates.
- Model FLOPs per token (training, forward and backward), as PaLM counts them (Chowdhery et al.
  2022, "PaLM: Scaling Language Modeling with Pathways", appendix B) and nanoGPT's
  `estimate_mfu` computes them (karpathy/nanoGPT, model.py): `6 N + 12 L d T`, with N the
  parameters less the position embeddings, L the blocks, d the model width and T the training
  sequence length (the attention term, for QK^T and AV, causal masking not discounted).
- MFU: tokens/s x FLOPs per token / (the peak FLOP/s of one device x the devices). A GPU's peak
  is its datasheet's dense peak for the trial's precision (`KNOWN_PEAKS`; fp32 without TF32,
  which torch leaves off for matmuls); a CPU's, or an unknown GPU's, is measured once per host,
  thread count and precision (the best FLOP/s of a square matmul) and kept in the cache folder.
"""

from __future__ import annotations

import json
import math
import os
import re
import resource
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.cache import cache_dir
from harness.env import cpu_model
from harness.methods.layers import blocks

TERA = 1e12
KNOWN_PEAKS: tuple[tuple[str, dict[str, float]], ...] = (
    (r"\bH200\b(?!.*NVL)", {"bf16": 989.4, "fp16": 989.4, "fp32": 66.9}),
    (r"\bH100 PCIe\b", {"bf16": 756.0, "fp16": 756.0, "fp32": 51.2}),
    (r"\bH100\b(?!.*(PCIe|NVL))", {"bf16": 989.4, "fp16": 989.4, "fp32": 66.9}),
    (r"\bA100\b", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}),
    (r"\bL40S\b", {"bf16": 362.1, "fp16": 362.1, "fp32": 91.6}),
    (r"\bL4\b", {"bf16": 121.0, "fp16": 121.0, "fp32": 30.3}),
)
"""Dense peak TFLOP/s (no sparsity) by a pattern of the CUDA device name, first match wins:
NVIDIA's datasheets (H200 and H100 SXM, H100 PCIe, A100, L40S, L4). fp32 is the CUDA-core rate:
torch computes fp32 matmuls without TF32 unless told to. Other GPUs (NVL parts included) are
measured."""
MEASURED_FILE = "peak_flops.json"
MATMUL_SIZE = {"cpu": 512, "cuda": 4096}
"""The side of the square matmul that measures a peak, by device type."""
POSITION_NAMES = ("embed_positions", "wpe", "position_embeddings")


def peak_memory_bytes(device: torch.device) -> float:
    """The trial's peak memory on `device` (see the module docstring)."""
    if device.type == "cuda":
        return float(torch.cuda.max_memory_allocated(device))
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)  # Linux: KiB


def flops_per_token(model: nn.Module, seq_len: int, layers: int) -> float:
    """Training FLOPs per token, `6 N + 12 L d T` (PaLM appendix B; nanoGPT's `estimate_mfu`)."""
    n = sum(
        parameter.numel()
        for name, parameter in model.named_parameters()
        if not any(part in name for part in POSITION_NAMES)
    )
    return float(6 * n + 12 * layers * model_width(model) * seq_len)


def model_width(model: nn.Module) -> int:
    """d, the width of the token embeddings."""
    get = getattr(model, "get_input_embeddings", None)
    embeddings = get() if callable(get) else None
    if not isinstance(embeddings, nn.Embedding):
        raise TypeError(f"{type(model).__name__} has no token embedding to read its width from")
    return embeddings.embedding_dim


def known_peak(device_name: str, precision: str) -> float | None:
    """The datasheet peak FLOP/s of a known GPU at `precision`, None for another device."""
    for pattern, peaks in KNOWN_PEAKS:
        if re.search(pattern, device_name):
            return peaks[precision] * TERA
    return None


def measured_peak(device: torch.device, precision: str, threads: int, folder: Path) -> float:
    """The best FLOP/s of a square matmul at `precision` on `device`, measured once per host,
    device, thread count and precision and kept in `folder`."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
    key = f"{name}|{device.type}|{threads} threads|{precision}"
    path = folder / MEASURED_FILE
    known = read_measured(path)
    if key not in known:
        known[key] = matmul_flops(device, precision)
        folder.mkdir(parents=True, exist_ok=True)
        written = path.with_suffix(f".{os.getpid()}.tmp")  # trials beside it may write too
        written.write_text(json.dumps(read_measured(path) | {key: known[key]}, indent=1))
        written.replace(path)
    return known[key]


def read_measured(path: Path) -> dict[str, float]:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def matmul_flops(device: torch.device, precision: str, repeats: int = 5) -> float:
    """The best FLOP/s of a `MATMUL_SIZE` square matmul at `precision` on `device`."""
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    size = MATMUL_SIZE.get(device.type, MATMUL_SIZE["cpu"])
    a, b = (torch.randn(size, size, device=device).to(dtype) for _ in range(2))
    best = math.inf
    for _ in range(repeats + 1):  # the first warms up
        started = time.perf_counter()
        torch.mm(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best


def peak_flops(device: torch.device, precision: str, threads: int) -> tuple[float, str]:
    """One device's peak FLOP/s at `precision` and where it comes from (datasheet, measured)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        if (peak := known_peak(name, precision)) is not None:
            return peak, f"datasheet {precision} peak of {name}"
    measured = measured_peak(device, precision, threads, cache_dir())
    where = "this GPU" if device.type == "cuda" else f"this CPU on {threads} threads"
    size = MATMUL_SIZE.get(device.type, MATMUL_SIZE["cpu"])
    source = f"measured: best {size}x{size} {precision} matmul on {where}"
    if device.type == "cpu" and precision != "fp32":
        # a CPU without native bf16/fp16 runs torch.mm at that precision on a slow fallback
        # (1.3 against 93 GFLOP/s on an AVX2-only EPYC) while autocast's linears do better:
        # its peak is never taken below the fp32 one
        fp32 = measured_peak(device, "fp32", threads, cache_dir())
        if fp32 > measured:
            return fp32, f"{source}, below its fp32 matmul: the fp32 peak"
    return measured, source


def trial_cost(
    model: nn.Module,
    device: torch.device,
    precision: str,
    threads: int,
    throughput: tuple[float, int],
    devices: int = 1,
) -> tuple[dict[str, float], dict[str, Any]]:
    """The cost metrics of a model trained on `devices` devices like `device` (`throughput`:
    tokens/s and the training sequence length) and what the stored environment says of its
    devices."""
    tokens_per_s, seq_len = throughput
    per_token = flops_per_token(model, seq_len, len(blocks(model)))
    peak, source = peak_flops(device, precision, threads)
    metrics = {
        "peak_memory_bytes": peak_memory_bytes(device),
        "flops_per_token": per_token,
        "mfu": tokens_per_s * per_token / (peak * devices),
        "devices": float(devices),
    }
    return metrics, {"device_count": devices, "peak_flops": peak, "peak_flops_source": source}
