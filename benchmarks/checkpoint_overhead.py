"""Checkpoint cost (issue 39): the time to write a trial's checkpoints as a fraction of its train
time at the default interval (each evaluation), the disk one checkpoint takes, and the steps an
interruption wastes (those after the last checkpoint: at most one interval, half on average).

    PYTHONPATH=$PWD python benchmarks/checkpoint_overhead.py [--steps 300] [--optimizer adamw]

The model and schedule are the findings suites' (suites/norms.yaml: gpt-8l, d_model 64, 300 steps
of batch 16, an evaluation every 50), fp32 on the CPU, one thread."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.runner import checkpoint
from harness.runner.checkpoint_paths import CHECKPOINTS_ENV
from harness.runner.trial import run_trial
from harness.spec import load_suite
from harness.spec.plan import plan_suite

SUITE = """\
suite: checkpoint-overhead
seeds: [0]
defaults:
  device: cpu
  precision: fp32
  time_limit_s: 3600
  train: {{steps: {steps}, batch_size: 16, eval_every: 50, eval_batches: 8, diagnostics: false,
           checkpoint: {{every: eval}}}}
  optimizer: {{name: {optimizer}, lr: 3.0e-3}}
models:
  gpt-8l: {{type: gpt, n_layers: 8, d_model: 64, n_heads: 4, max_seq_len: 128}}
tasks:
  shakespeare: {{type: lm, corpus: shakespeare, tokenizer: byte, seq_len: 128}}
methods:
  pre-ln: {{}}
baseline: pre-ln
"""


def measure(steps: int, optimizer: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        suite_path = Path(folder) / "suite.yaml"
        suite_path.write_text(SUITE.format(steps=steps, optimizer=optimizer))
        (trial,) = plan_suite(load_suite(suite_path))
        os.environ[CHECKPOINTS_ENV] = str(Path(folder) / "checkpoints")
        writes: list[float] = []
        sizes: list[int] = []
        save = checkpoint.Checkpoints.save

        def timed(self: checkpoint.Checkpoints, step: int, training: checkpoint.Training) -> None:
            started = time.perf_counter()
            save(self, step, training)
            writes.append(time.perf_counter() - started)
            sizes.append((self.folder / f"step-{step:08d}.pt").stat().st_size)

        checkpoint.Checkpoints.save = timed  # type: ignore[method-assign]
        try:
            result = run_trial(trial.config, key=trial.key)
        finally:
            checkpoint.Checkpoints.save = save  # type: ignore[method-assign]
        assert result.status == "done", result.error
    interval = 50
    return {
        "steps": steps,
        "optimizer": optimizer,
        "checkpoints": len(writes),
        "write_s_total": round(sum(writes), 4),
        "write_s_each": round(sum(writes) / max(len(writes), 1), 4),
        "train_s": round(result.train_time_s, 2),
        "write_fraction_of_train": round(sum(writes) / result.train_time_s, 4),
        "bytes_per_checkpoint": max(sizes, default=0),
        "wasted_steps_per_interruption_max": interval - 1,
        "wasted_steps_per_interruption_mean": (interval - 1) / 2,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--optimizer", default="adamw")
    args = parser.parse_args()
    print(json.dumps(measure(args.steps, args.optimizer), indent=2))


if __name__ == "__main__":
    main()
