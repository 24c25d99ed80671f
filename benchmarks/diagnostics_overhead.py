"""Cost of the layerwise diagnostics (SPEC 5.7) on the 8-layer gpt of suites/norms.yaml, one thread.

    .venv/bin/python benchmarks/diagnostics_overhead.py [--repeats 20]

Times, by median over `repeats`: a train step without and with the probe, the probe's own work,
the hidden-state statistics and one evaluation; then the diagnostics' share of train time at the
evaluation intervals the suites use.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from harness.diagnostics import StepProbe, hidden_state_stats
from harness.methods.layers import blocks
from harness.runner.trial import Clock, build, evaluate, prepare, train_step
from harness.spec.schema import TrialSettings

SETTINGS = {
    "train": {"steps": 300, "batch_size": 16, "eval_every": 50, "eval_batches": 8},
    "optimizer": {"name": "adamw", "lr": 3e-3, "weight_decay": 0.1, "betas": [0.9, 0.95]},
}
MODEL = {"type": "gpt", "n_layers": 8, "d_model": 64, "n_heads": 4, "max_seq_len": 128}
TASK = {"type": "lm", "corpus": "shakespeare", "tokenizer": "byte", "seq_len": 128}


def seconds(fn: Callable[..., object], *args: object) -> float:
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


def main(repeats: int) -> None:
    torch.set_num_threads(1)
    settings = TrialSettings.model_validate(SETTINGS).model_dump(mode="json")
    config = {**settings, "seed": 0, "model": MODEL, "task": TASK}
    trial = build(prepare(config))
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    batches = trial.task.train_batches(16, torch.Generator().manual_seed(0))
    plain, probed, probe_own, hidden = [], [], [], []
    for _ in range(repeats):
        batch = next(batches)
        plain.append(seconds(train_step, trial, batch, scaler))
        probe = StepProbe(blocks(trial.model))
        probed.append(seconds(train_step, trial, batch, scaler, probe))
        probe_own.append(probe.seconds)
        hidden.append(seconds(hidden_state_stats, trial.model, trial.probe_inputs, 0))
    step, per_eval = (
        statistics.median(plain),
        statistics.median(probe_own) + statistics.median(hidden),
    )
    one_eval = seconds(evaluate, trial, Clock(), False)
    print(
        f"train step {1e3 * step:.1f} ms, with the probe {1e3 * statistics.median(probed):.1f} ms"
    )
    print(
        f"probe {1e3 * statistics.median(probe_own):.1f} ms + hidden-state statistics "
        f"{1e3 * statistics.median(hidden):.1f} ms = {1e3 * per_eval:.0f} ms per evaluation "
        f"(an evaluation itself: {1e3 * one_eval:.0f} ms)"
    )
    for eval_every in (25, 50):
        print(f"eval_every={eval_every}: {100 * per_eval / (eval_every * step):.2f}% of train time")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    main(parser.parse_args().repeats)
