"""A bf16 suite on one CUDA GPU: tokens/s and model FLOPs utilization (MFU) of each trial.

    .venv/bin/python -m benchmarks.gpu_bf16 [--steps 300] [--out gpu_bf16.json]

Not run yet: written for a session with a GPU (no device machine was lent when it was written).
It needs about 2-4 minutes on one modern GPU (start-up, a matmul peak, 4 trials of 300 steps).

1. The bf16 matmul peak of this GPU, measured: the best FLOP/s of an 8192 x 8192 `torch.mm`
   (CUDA-synchronized), so MFU is against what this device reaches, not a datasheet.
2. A tiny suite, written to a temporary directory and run by `layerbench run --no-mlflow` into a
   fresh SQLite database: a nanoGPT-shaped `gpt` (6 layers, d_model 384, 6 heads, sequence 256,
   learned positions, GELU MLP), Shakespeare bytes, batch 64, `device: cuda`, `precision: bf16`,
   Pre-LN and Post-LN x 2 seeds.
3. From the stored trials: tokens/s = tokens / train time (optimizer steps only, as the runner
   books them); MFU = tokens/s x FLOPs per token / the measured peak, with FLOPs per token from
   nanoGPT's `estimate_mfu` (PaLM appendix B): 6N + 12 L d T, N without position embeddings.

Prints a table and writes the figures as JSON (`--out`, e.g. under $OUT on a device machine).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from harness.core import Status
from harness.runner.trial import build, prepare
from harness.store.db import make_engine
from harness.store.models import Trial

MODEL = {
    "type": "gpt",
    "n_layers": 6,
    "d_model": 384,
    "n_heads": 6,
    "max_seq_len": 256,
    "pos": "learned",
    "mlp": "gelu",
}
TASK = {"type": "lm", "corpus": "shakespeare", "tokenizer": "byte", "seq_len": 256}
BATCH_SIZE = 64


def suite(steps: int) -> dict[str, Any]:
    """The bf16 suite: Pre-LN vs Post-LN on CUDA, 2 seeds."""
    return {
        "suite": "gpu-bf16",
        "description": "bf16 throughput and MFU on one CUDA GPU (benchmarks/gpu_bf16.py)",
        "seeds": [0, 1],
        "defaults": {
            "device": "cuda",
            "precision": "bf16",
            "time_limit_s": 600,
            "train": {
                "steps": steps,
                "batch_size": BATCH_SIZE,
                "warmup_steps": steps // 10,
                "schedule": "cosine",
                "eval_every": steps,
                "eval_batches": 4,
                "grad_clip": 1.0,
            },
            "optimizer": {"name": "adamw", "lr": 1.0e-3, "weight_decay": 0.1, "betas": [0.9, 0.95]},
            "norm": {"placement": "pre", "type": "layernorm"},
        },
        "models": {"gpt-6l-384": MODEL},
        "tasks": {"shakespeare": TASK},
        "methods": {"pre-ln": {}, "post-ln": {"norm": {"placement": "post"}}},
        "baseline": "pre-ln",
        "rank": {"metric": "val_loss"},
    }


def matmul_peak(size: int = 8192, repeats: int = 20) -> float:
    """The best bf16 FLOP/s of a square matmul on the current CUDA device."""
    a = torch.randn(size, size, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(size, size, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        torch.mm(a, b)
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(repeats):
        started = time.perf_counter()
        torch.mm(a, b)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best


def flops_per_token(steps: int) -> float:
    """6N + 12 L d T of the suite's model as the harness builds it (N without positions)."""
    config = {**suite(steps)["defaults"], "seed": 0, "model": MODEL, "task": TASK}
    config["device"] = "cpu"  # the parameter count does not depend on the device
    model = build(prepare(config)).model
    n = sum(p.numel() for name, p in model.named_parameters() if "embed_positions" not in name)
    return 6 * n + 12 * MODEL["n_layers"] * MODEL["d_model"] * TASK["seq_len"]


def run_suite(steps: int, directory: Path) -> list[dict[str, Any]]:
    """Run the suite with `layerbench run`; its stored trials' tokens, train time and status."""
    path, url = directory / "gpu-bf16.yaml", f"sqlite:///{directory / 'results.db'}"
    path.write_text(yaml.safe_dump(suite(steps), sort_keys=False))
    layerbench = str(Path(sys.executable).parent / "layerbench")
    subprocess.run([layerbench, "run", str(path), "--db", url, "--no-mlflow"], check=False)
    with Session(make_engine(url)) as session:
        rows = session.execute(
            select(Trial.method, Trial.seed, Trial.status, Trial.tokens, Trial.train_time_s)
        )
        return [row._asdict() for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", type=Path, default=Path("gpu_bf16.json"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("error: no CUDA device; this benchmark runs on a GPU machine")
    device = torch.cuda.get_device_name()
    peak, per_token = matmul_peak(), flops_per_token(args.steps)
    with tempfile.TemporaryDirectory() as directory:
        trials = run_suite(args.steps, Path(directory))
    for trial in trials:
        done = trial["status"] == Status.DONE and trial["train_time_s"]
        trial["tokens_per_s"] = trial["tokens"] / trial["train_time_s"] if done else None
        trial["mfu"] = trial["tokens_per_s"] * per_token / peak if done else None
    print(f"{device}: bf16 matmul peak {peak / 1e12:.1f} TFLOP/s, {per_token:.3g} FLOPs/token")
    print("| method | seed | status | tokens/s | MFU |\n|---|---|---|---|---|")
    for t in trials:
        rate = f"{t['tokens_per_s']:.0f}" if t["tokens_per_s"] else "-"
        mfu = f"{t['mfu']:.3f}" if t["mfu"] else "-"
        print(f"| {t['method']} | {t['seed']} | {t['status']} | {rate} | {mfu} |")
    figures = {"device": device, "peak_flops": peak, "flops_per_token": per_token, "trials": trials}
    args.out.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
