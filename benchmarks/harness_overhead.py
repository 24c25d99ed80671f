"""Harness overhead: the runner's training loop vs a bare PyTorch loop on the same model and data.

    .venv/bin/python -m benchmarks.harness_overhead [--steps 100] [--repeats 3]

Both train the 8-layer gpt of suites/norms.yaml on Shakespeare bytes for `steps` steps with AdamW,
one thread. The harness figure is the trial's train time (optimizer steps only, so it includes
divergence checks, progress reports and the diagnostics probe, but not evaluation); the bare loop is
`loss.backward(); clip; step; schedule; zero_grad` and nothing else. Medians of alternating repeats.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

from harness.runner.trial import build, prepare, run_trial
from harness.spec.schema import TrialSettings

MODEL = {"type": "gpt", "n_layers": 8, "d_model": 64, "n_heads": 4, "max_seq_len": 128}
TASK = {"type": "lm", "corpus": "shakespeare", "tokenizer": "byte", "seq_len": 128}


def config(steps: int) -> dict[str, Any]:
    settings = {
        "train": {"steps": steps, "batch_size": 16, "eval_every": steps, "eval_batches": 2},
        "optimizer": {"name": "adamw", "lr": 3e-3, "weight_decay": 0.1, "betas": [0.9, 0.95]},
    }
    dumped = TrialSettings.model_validate(settings).model_dump(mode="json")
    return {**dumped, "seed": 0, "model": MODEL, "task": TASK}


def bare_loop(trial_config: dict[str, Any]) -> float:
    """Seconds for the same steps written as a plain PyTorch loop."""
    trial = build(prepare(trial_config))
    train = trial.recipe.train
    batches = trial.task.train_batches(train.batch_size, torch.Generator().manual_seed(0))
    started = time.perf_counter()
    for _ in range(train.steps):
        loss = trial.task.loss(trial.model, next(batches))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trial.model.parameters(), train.grad_clip)
        trial.optimizer.step()
        trial.scheduler.step()
        trial.optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def main(steps: int, repeats: int) -> None:
    torch.set_num_threads(1)
    trial_config = config(steps)
    harness, bare = [], []
    for _ in range(repeats):
        harness.append(run_trial(trial_config).train_time_s)
        bare.append(bare_loop(trial_config))
    ours, theirs = statistics.median(harness), statistics.median(bare)
    print(f"{steps} steps, {repeats} repeats, 1 thread")
    print(f"harness train time {ours:.2f} s, bare loop {theirs:.2f} s: ratio {ours / theirs:.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    main(arguments.steps, arguments.repeats)
