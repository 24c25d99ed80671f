"""Cost of the layerwise diagnostics (SPEC 5.7) on the 8-layer gpt of suites/norms.yaml, one thread.

    .venv/bin/python benchmarks/diagnostics_overhead.py [--repeats 20]

Times, by median over `repeats`: a train step without and with the probe, the probe's own work,
the hidden-state statistics (RMS, max, block influence, peak), the geometric ones of
`harness.diagnostics_geometry` (effective rank and tokenwise share on the hidden states; layer
rotation and warm-started spectral norms on the weights) and one evaluation; then the
diagnostics' share of train time at the evaluation intervals the suites use.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from harness.diagnostics import StepProbe, hidden_profile, hidden_states
from harness.diagnostics_geometry import (
    WeightTracker,
    feature_norm_stats,
    mlp_features,
    representation_stats,
)
from harness.methods.layers import blocks
from harness.runner.timing import Clock
from harness.runner.trial import build, evaluate, prepare, train_step
from harness.spec.recipe import resolved_settings
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
    resolved = resolved_settings(TrialSettings.model_validate(SETTINGS), cuda=False)
    settings = resolved.model_dump(mode="json")
    config = {**settings, "seed": 0, "model": MODEL, "task": TASK}
    trial = build(prepare(config))
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    batches = trial.task.train_batches(16, torch.Generator().manual_seed(0))
    tracker = trial.tracker or WeightTracker(blocks(trial.model))
    plain, probed, probe_own, hidden, geometry, weights, norms = [], [], [], [], [], [], []
    for _ in range(repeats):
        batch = next(batches)
        plain.append(seconds(train_step, trial, batch, scaler))
        probe = StepProbe(blocks(trial.model))
        probed.append(seconds(train_step, trial, batch, scaler, probe))
        probe_own.append(probe.seconds)
        started = time.perf_counter()
        with mlp_features(trial.model) as features:  # as a trial collects them
            states = hidden_states(trial.model, trial.probe_inputs)
        hidden_profile(states, 0)
        hidden.append(time.perf_counter() - started)
        geometry.append(seconds(representation_stats, states, 0))
        weights.append(seconds(tracker.stats, 0))
        norms.append(seconds(feature_norm_stats, features, 0))
    step = statistics.median(plain)
    parts = [statistics.median(t) for t in (probe_own, hidden, geometry, weights, norms)]
    per_eval = sum(parts)
    one_eval = seconds(evaluate, trial, Clock(), False)
    print(
        f"train step {1e3 * step:.1f} ms, with the probe {1e3 * statistics.median(probed):.1f} ms"
    )
    print(
        f"probe {1e3 * parts[0]:.1f} ms + hidden-state statistics {1e3 * parts[1]:.1f} ms + "
        f"effective rank and tokenwise share {1e3 * parts[2]:.1f} ms + layer rotation and "
        f"spectral norms {1e3 * parts[3]:.1f} ms + feature norms {1e3 * parts[4]:.2f} ms = "
        f"{1e3 * per_eval:.0f} ms per evaluation "
        f"(an evaluation itself: {1e3 * one_eval:.0f} ms)"
    )
    for eval_every in (25, 50, 100):
        print(f"eval_every={eval_every}: {100 * per_eval / (eval_every * step):.2f}% of train time")
        geometric = parts[2] + parts[3] + parts[4]
        print(f"  of which the geometric diagnostics: {100 * geometric / (eval_every * step):.2f}%")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    main(parser.parse_args().repeats)
