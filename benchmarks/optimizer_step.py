"""Cost of one optimizer step for every method of suites/optimizers.yaml, one thread.

    .venv/bin/python benchmarks/optimizer_step.py [--repeats 30]

On the 8-layer gpt of the suite with one fixed Shakespeare gradient (given to the parameters that a
layerwise treatment trains at that step), times `optimizer.step()` of each method (its first sweep
point; the rate does not change the cost), the methods interleaved in each repeat so that machine
noise hits them alike. Prints the median step time, its ratio to AdamW's, and its share of a whole
train step (forward, backward, step). The last lines compare RMNP's row normalization with
torch.optim.Muon's Newton-Schulz on the same hidden matrices (the cost RMNP claims to save), and
time the product X X^T X of one Newton-Schulz iteration in bfloat16 (torch.optim.Muon's precision)
against float32 on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from harness.runner.trial import BuiltTrial, build, prepare, train_step
from harness.spec.check import load_suite
from harness.spec.plan import plan_suite

SUITE = Path(__file__).parent.parent / "suites" / "optimizers.yaml"


def trials(names: list[str] | None) -> dict[str, BuiltTrial]:
    """Each method's first planned Shakespeare trial (seed 0)."""
    built: dict[str, BuiltTrial] = {}
    for planned in plan_suite(load_suite(SUITE)):
        wanted = names is None or planned.method in names
        if wanted and planned.task == "shakespeare" and planned.method not in built:
            built[planned.method] = build(prepare(planned.config))
    return built


def full_gradient(trial: BuiltTrial) -> dict[torch.nn.Parameter, torch.Tensor]:
    """One batch's gradient for every parameter, frozen ones included."""
    frozen = [p for p in trial.model.parameters() if not p.requires_grad]
    for p in frozen:
        p.requires_grad_(True)
    batch = next(trial.task.train_batches(16, torch.Generator().manual_seed(0)))
    trial.task.loss(trial.model, batch).backward()
    for p in frozen:
        p.requires_grad_(False)
    return {p: p.grad.detach().clone() for p in trial.model.parameters()}


def seconds_per_step(trial: BuiltTrial, gradient: dict[torch.nn.Parameter, torch.Tensor]) -> float:
    """One optimizer step on the fixed gradient of the parameters its treatment trains now."""
    for p, grad in gradient.items():
        p.grad = grad.clone() if p.requires_grad else None
    started = time.perf_counter()
    trial.optimizer.step()
    return time.perf_counter() - started


def median_seconds(work: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def whole_step(trial: BuiltTrial, repeats: int) -> float:
    """Median seconds of a whole train step (forward, backward, clip, step)."""
    batches = trial.task.train_batches(16, torch.Generator().manual_seed(1))
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    return median_seconds(lambda: train_step(trial, next(batches), scaler), repeats)


def newton_schulz_product(dtype: torch.dtype, repeats: int) -> float:
    """Median seconds of X X^T X for a 256 x 64 matrix (an MLP weight of the suite's model)."""
    x = torch.randn(256, 64, generator=torch.Generator().manual_seed(0)).to(dtype)
    return median_seconds(lambda: x @ x.T @ x, repeats)


def main(repeats: int, names: list[str] | None) -> None:
    torch.set_num_threads(1)
    built = trials(names)
    gradients = {name: full_gradient(trial) for name, trial in built.items()}
    times: dict[str, list[float]] = {name: [] for name in built}
    for _ in range(repeats):
        for name, trial in built.items():
            times[name].append(seconds_per_step(trial, gradients[name]))
    medians = {name: statistics.median(found) for name, found in times.items()}
    reference = medians.get("adamw")
    train = whole_step(built["adamw"], repeats) if reference else None
    print(f"{repeats} repeats, 1 thread, 8-layer gpt (d_model 64), Shakespeare batch 16 x 128")
    print("| method | optimizer step (ms) | vs adamw | share of a train step |")
    print("| --- | --- | --- | --- |")
    for name, median in medians.items():
        ratio = f"{median / reference:.2f}" if reference else "n/a"
        share = f"{100 * median / (train - reference + median):.0f}%" if train else "n/a"
        print(f"| {name} | {1e3 * median:.2f} | {ratio} | {share} |")
    if train:
        print(f"adamw whole train step: {1e3 * train:.1f} ms")
    if "muon" in medians and "rmnp" in medians:
        print(f"rmnp / muon step time: {medians['rmnp'] / medians['muon']:.3f}")
    bf16, fp32 = (newton_schulz_product(t, repeats) for t in (torch.bfloat16, torch.float32))
    print(f"X X^T X (256 x 64): bfloat16 {1e3 * bf16:.2f} ms, float32 {1e3 * fp32:.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--methods", nargs="+", help="a subset of the suite's methods")
    arguments = parser.parse_args()
    main(arguments.repeats, arguments.methods)
