"""Training throughput and model FLOPs utilization (MFU) of the built-in gpt, fp32 and bf16.

    .venv/bin/python -m benchmarks.throughput [--steps 30] [--repeats 3] [--threads 1]

For each precision, side by side in one run:

- the matmul peak of this machine: the best FLOP/s of a square `torch.mm` in that dtype;
- the harness: `run_trial` of a nanoGPT-shaped `gpt` (learned positions, GELU MLP, pre-LayerNorm,
  tied head), whose train time counts optimizer steps only;
- a bare nanoGPT-style model of the same shapes trained by a plain loop (`autocast; backward; clip;
  step; schedule; zero_grad`), written here in the style of nanoGPT's model.py.

Model FLOPs per token follow nanoGPT's `estimate_mfu` (PaLM appendix B): 6N + 12 L d T, with N the
parameters without the position embeddings, L layers, d the width and T the sequence length.
MFU = tokens/s x FLOPs per token / the measured peak of the same dtype. Medians of alternating
repeats.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.runner.trial import autocast, build, prepare, run_trial
from harness.spec.schema import TrialSettings

SHAPES = {"n_layers": 4, "d_model": 256, "n_heads": 4, "max_seq_len": 128}
MODEL = {**SHAPES, "type": "gpt", "pos": "learned", "mlp": "gelu"}
TASK = {"type": "lm", "corpus": "shakespeare", "tokenizer": "byte", "seq_len": 128}
BATCH_SIZE = 16
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def trial_config(steps: int, precision: str) -> dict[str, Any]:
    settings = {
        "precision": precision,
        "train": {
            "steps": steps,
            "batch_size": BATCH_SIZE,
            "eval_every": steps,
            "eval_batches": 1,
            "diagnostics": False,
        },
        "optimizer": {"name": "adamw", "lr": 1e-3, "weight_decay": 0.1, "betas": [0.9, 0.95]},
        "norm": {"placement": "pre", "type": "layernorm"},
    }
    dumped = TrialSettings.model_validate(settings).model_dump(mode="json")
    return {**dumped, "seed": 0, "model": MODEL, "task": TASK}


class Block(nn.Module):
    """nanoGPT's block: x + attn(ln(x)), x + mlp(ln(x)), no biases."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(d, bias=False), nn.LayerNorm(d, bias=False)
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        self.fc, self.fc_out = nn.Linear(d, 4 * d, bias=False), nn.Linear(4 * d, d, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc_out(F.gelu(self.fc(self.ln_2(x))))


class BareGPT(nn.Module):
    """nanoGPT's GPT at the benchmark's shapes, with a tied head."""

    def __init__(self, vocab: int, n_layers: int, d_model: int, n_heads: int, max_seq_len: int):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d_model), nn.Embedding(max_seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_heads) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model, bias=False)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.wte.weight
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)

    def forward(self, idx: Tensor, targets: Tensor) -> Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def flops_per_token(model: nn.Module, n_layers: int, d_model: int, seq_len: int) -> float:
    """nanoGPT's 6N + 12 L d T, N without position embeddings (tied weights counted once)."""
    n = sum(p.numel() for name, p in model.named_parameters() if "wpe" not in name)
    return 6 * n + 12 * n_layers * d_model * seq_len


def matmul_peak(dtype: torch.dtype, size: int = 1024, repeats: int = 10) -> float:
    """The best FLOP/s of a square matmul in `dtype`."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    torch.mm(a, b)
    best = math.inf
    for _ in range(repeats):
        started = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best


def harness_tokens_per_s(steps: int, precision: str) -> float:
    result = run_trial(trial_config(steps, precision))
    return steps * BATCH_SIZE * TASK["seq_len"] / result.train_time_s


def bare_tokens_per_s(steps: int, precision: str) -> tuple[float, float]:
    """Tokens/s of the bare loop, and the bare model's FLOPs per token."""
    config = trial_config(steps, precision)
    trial = build(config, prepare(config))
    torch.manual_seed(0)
    model = BareGPT(trial.task.vocab_size, **SHAPES)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    batches = trial.task.train_batches(BATCH_SIZE, torch.Generator().manual_seed(0))
    started = time.perf_counter()
    for _ in range(steps):
        inputs, targets = next(batches)
        with autocast(torch.device("cpu"), precision):
            loss = model(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
    elapsed = time.perf_counter() - started
    per_token = flops_per_token(model, SHAPES["n_layers"], SHAPES["d_model"], TASK["seq_len"])
    return steps * BATCH_SIZE * TASK["seq_len"] / elapsed, per_token


def main(steps: int, repeats: int, threads: int) -> None:
    torch.set_num_threads(threads)
    print(
        f"gpt {SHAPES}, batch {BATCH_SIZE}, {steps} steps, {repeats} repeats, {threads} thread(s)"
    )
    print(
        "precision | peak GFLOP/s | harness tok/s | bare tok/s | harness/bare | MFU harness, bare"
    )
    for precision, dtype in DTYPES.items():
        peaks, ours, bare, per_token = [], [], [], 0.0
        for _ in range(repeats):
            peaks.append(matmul_peak(dtype))
            ours.append(harness_tokens_per_s(steps, precision))
            tokens, per_token = bare_tokens_per_s(steps, precision)
            bare.append(tokens)
        peak, harness, plain = max(peaks), statistics.median(ours), statistics.median(bare)
        print(
            f"{precision} | {peak / 1e9:.1f} | {harness:.0f} | {plain:.0f} | {harness / plain:.3f}"
            f" | {harness * per_token / peak:.3f}, {plain * per_token / peak:.3f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    arguments = parser.parse_args()
    main(arguments.steps, arguments.repeats, arguments.threads)
