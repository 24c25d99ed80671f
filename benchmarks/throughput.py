"""Training throughput and model FLOPs utilization (MFU) of the built-in gpt, fp32 and bf16.

    .venv/bin/python -m benchmarks.throughput [--steps 10] [--repeats 5] [--threads 1] [--compile]
        [--shapes nanogpt,default] [--precisions fp32,bf16] [--profile]

For each shape and precision, side by side in one process:

- the matmul peak of this machine: the best FLOP/s of a square `torch.mm` in that dtype;
- the harness: the runner's own `train_step` (autocast, the task's loss, backward, unscale,
  clip, step, schedule, zero_grad) on the built-in `gpt` built by the runner's `build`;
- a bare model of the same shapes written here in the style of nanoGPT's model.py (fused QKV
  projection), trained by a plain loop (`autocast; backward; clip; step; schedule; zero_grad`);
  for the `default` shape the same math as the harness: RoPE with the harness's own
  `rope_tables` (computed once, as the model caches them) and `apply_rope`, SwiGLU
  (`silu(gate) * up`, the two projections fused into one matmul).

Shapes: `nanogpt` (learned positions, GELU MLP, as nanoGPT) and `default` (the `gpt` section's
defaults: RoPE, SwiGLU MLP); 4 layers, width 256, 4 heads, sequence 128, tied head, pre-LN.
After two warm-up steps each, the two loops alternate in blocks of `steps` steps, `repeats`
times; tokens/s is the median over blocks (the marginal rate: no start-up in it). The ratio is
also given in CPU time (process time, one thread): on a loaded machine, wall-clock blocks swing
with the scheduler, CPU time much less. `--profile` then runs `steps` steps of each under
`torch.profiler` and prints the operators whose self CPU time differs most between them. With
`--compile`, a third loop runs the harness with `train.compile: true`; its first step (the
compilation) is reported apart.

Model FLOPs per token follow nanoGPT's `estimate_mfu` (PaLM appendix B): 6N + 12 L d T, with N the
parameters without the position embeddings, L layers, d the width and T the sequence length.
MFU = tokens/s x FLOPs per token / the measured peak of the same dtype.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.models.catalog import default_d_ff
from harness.models.gpt import apply_rope, rope_tables
from harness.runner.trial import BuiltTrial, autocast, build, prepare, train_step
from harness.spec.schema import TrialSettings

SHAPES = {"n_layers": 4, "d_model": 256, "n_heads": 4, "max_seq_len": 128}
KINDS = {"nanogpt": {"pos": "learned", "mlp": "gelu"}, "default": {"pos": "rope", "mlp": "swiglu"}}
TASK = {"type": "lm", "corpus": "shakespeare", "tokenizer": "byte", "seq_len": 128}
BATCH_SIZE = 16
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
CPU = torch.device("cpu")


def trial_config(kind: str, precision: str, compiled: bool = False) -> dict[str, Any]:
    settings = {
        "precision": precision,
        "device": "cpu",
        "train": {
            "steps": 1000,
            "batch_size": BATCH_SIZE,
            "diagnostics": False,
            "compile": compiled,
        },
        "optimizer": {"name": "adamw", "lr": 1e-3, "weight_decay": 0.1, "betas": [0.9, 0.95]},
        "norm": {"placement": "pre", "type": "layernorm"},
    }
    dumped = TrialSettings.model_validate(settings).model_dump(mode="json")
    model = {**SHAPES, "type": "gpt", **KINDS[kind]}
    return {**dumped, "seed": 0, "model": model, "task": TASK}


class Block(nn.Module):
    """nanoGPT's block: x + attn(ln(x)), x + mlp(ln(x)), no biases; with `rope`, rotary
    positions on q and k and a SwiGLU MLP (the `default` shape)."""

    def __init__(self, d: int, heads: int, rope: bool) -> None:
        super().__init__()
        self.heads, self.rope = heads, rope
        self.ln_1, self.ln_2 = nn.LayerNorm(d, bias=False), nn.LayerNorm(d, bias=False)
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
        hidden = default_d_ff(d, "swiglu" if rope else "gelu")
        self.fc = nn.Linear(d, 2 * hidden if rope else hidden, bias=False)
        self.fc_out = nn.Linear(hidden, d, bias=False)

    def forward(self, x: Tensor, tables: tuple[Tensor, Tensor] | None) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if tables is not None:
            q, k = apply_rope(q, tables), apply_rope(k, tables)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        h = self.fc(self.ln_2(x))
        if self.rope:
            gate, up = h.chunk(2, dim=-1)
            return x + self.fc_out(F.silu(gate) * up)
        return x + self.fc_out(F.gelu(h))


class BareGPT(nn.Module):
    """nanoGPT's GPT at the benchmark's shapes, with a tied head; `rope`: the default shape."""

    def __init__(
        self, vocab: int, n_layers: int, d_model: int, n_heads: int, max_seq_len: int, rope: bool
    ) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = None if rope else nn.Embedding(max_seq_len, d_model)
        self.tables = rope_tables(max_seq_len, d_model // n_heads, CPU) if rope else None
        self.blocks = nn.ModuleList(Block(d_model, n_heads, rope) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model, bias=False)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.wte.weight
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)

    def forward(self, idx: Tensor, targets: Tensor) -> Tensor:
        t = idx.shape[1]
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(t))
        tables = None if self.tables is None else (self.tables[0][:t], self.tables[1][:t])
        for block in self.blocks:
            x = block(x, tables)
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


Step = Callable[[], None]


def harness_step(trial: BuiltTrial) -> Step:
    """One step of the runner's training loop (the part its train clock times)."""
    batches = trial.task.train_batches(BATCH_SIZE, torch.Generator().manual_seed(0))
    scaler = torch.amp.GradScaler("cpu", enabled=False)

    def step() -> None:
        train_step(trial, next(batches), scaler)

    return step


def bare_step(trial: BuiltTrial, kind: str, precision: str) -> tuple[Step, float]:
    """One step of the bare loop, and the bare model's FLOPs per token."""
    torch.manual_seed(0)
    model = BareGPT(trial.task.vocab_size, **SHAPES, rope=KINDS[kind]["pos"] == "rope")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, betas=(0.9, 0.95))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    batches = trial.task.train_batches(BATCH_SIZE, torch.Generator().manual_seed(0))

    def step() -> None:
        inputs, targets = next(batches)
        with autocast(CPU, precision):
            loss = model(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)

    per_token = flops_per_token(model, SHAPES["n_layers"], SHAPES["d_model"], TASK["seq_len"])
    return step, per_token


def block_seconds(step: Step, steps: int) -> tuple[float, float]:
    """Wall and CPU seconds of `steps` steps (one thread: the CPU time is the step's own work,
    without the time other processes of a loaded machine took the core)."""
    started, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    return time.perf_counter() - started, time.process_time() - cpu


def built(kind: str, precision: str, compiled: bool = False) -> BuiltTrial:
    config = trial_config(kind, precision, compiled)
    return build(prepare(config))


def measure(
    kind: str, precision: str, steps: int, repeats: int, compiled: bool, profiled: bool
) -> None:
    loops = {"harness": harness_step(built(kind, precision))}
    loops["bare"], per_token = bare_step(built(kind, precision), kind, precision)
    compile_s = math.nan
    if compiled:
        loops["compiled"] = harness_step(built(kind, precision, compiled=True))
        compile_s = block_seconds(loops["compiled"], 1)[0]
    for step in loops.values():
        block_seconds(step, 2)
    seconds: dict[str, list[float]] = {name: [] for name in loops}
    cpu: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(repeats):
        for name, step in loops.items():
            wall, used = block_seconds(step, steps)
            seconds[name].append(wall)
            cpu[name].append(used)
    tokens = {
        name: steps * BATCH_SIZE * TASK["seq_len"] / statistics.median(s)
        for name, s in seconds.items()
    }
    peak = matmul_peak(DTYPES[precision])
    ratio = tokens["harness"] / tokens["bare"]
    cpu_ratio = statistics.median(cpu["bare"]) / statistics.median(cpu["harness"])
    line = (
        f"{kind} | {precision} | {peak / 1e9:.1f} | {tokens['harness']:.0f} | {tokens['bare']:.0f}"
        f" | {ratio:.3f} | {cpu_ratio:.3f} | {tokens['harness'] * per_token / peak:.3f},"
        f" {tokens['bare'] * per_token / peak:.3f}"
    )
    if compiled:
        speedup = tokens["compiled"] / tokens["harness"]
        line += f" | {tokens['compiled']:.0f} | {speedup:.3f} | {compile_s:.1f}"
    print(line, flush=True)
    if profiled:
        print_profile(loops, steps)


def op_profile(step: Step, steps: int) -> dict[str, tuple[float, int]]:
    """Self CPU seconds and calls of each operator over `steps` steps (torch.profiler)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        for _ in range(steps):
            step()
    return {op.key: (op.self_cpu_time_total / 1e6, op.count) for op in profile.key_averages()}


def print_profile(loops: dict[str, Step], steps: int, rows: int = 15) -> None:
    """The `rows` operators whose self CPU time differs most between harness and bare."""
    harness, bare = op_profile(loops["harness"], steps), op_profile(loops["bare"], steps)
    totals = sum(t for t, _ in harness.values()), sum(t for t, _ in bare.values())
    print(f"  profile of {steps} steps, self CPU s: harness {totals[0]:.3f}, bare {totals[1]:.3f}")
    print("  operator | harness s (calls) | bare s (calls)")
    ops = sorted(
        set(harness) | set(bare),
        key=lambda op: -abs(harness.get(op, (0.0, 0))[0] - bare.get(op, (0.0, 0))[0]),
    )
    for op in ops[:rows]:
        (h, h_calls), (b, b_calls) = harness.get(op, (0.0, 0)), bare.get(op, (0.0, 0))
        print(f"  {op} | {h:.3f} ({h_calls}) | {b:.3f} ({b_calls})")


def main(
    steps: int,
    repeats: int,
    threads: int,
    compiled: bool,
    selected: tuple[list[str], list[str]] = (list(KINDS), list(DTYPES)),
    profiled: bool = False,
) -> None:
    """Every selected (shape, precision): one table row, and with `profiled` its profile."""
    torch.set_num_threads(threads)
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average {os.getloadavg()}")
    print(
        f"gpt {SHAPES}, batch {BATCH_SIZE}, blocks of {steps} steps, {repeats} repeats,"
        f" {threads} thread(s)"
    )
    header = "shape | precision | peak GFLOP/s | harness tok/s | bare tok/s | harness/bare"
    header += " | harness/bare in CPU time | MFU harness, bare"
    if compiled:
        header += " | compiled tok/s | compiled/eager | first compiled step (s)"
    print(header)
    kinds, precisions = selected
    for kind in kinds:
        for precision in precisions:
            measure(kind, precision, steps, repeats, compiled, profiled)
    print(f"{time.strftime('%H:%M:%S')}, load average {os.getloadavg()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--shapes", default=",".join(KINDS), help="nanogpt,default")
    parser.add_argument("--precisions", default=",".join(DTYPES), help="fp32,bf16")
    parser.add_argument("--profile", action="store_true", help="op-by-op profile of each row")
    arguments = parser.parse_args()
    main(
        arguments.steps,
        arguments.repeats,
        arguments.threads,
        arguments.compile,
        (arguments.shapes.split(","), arguments.precisions.split(",")),
        arguments.profile,
    )
