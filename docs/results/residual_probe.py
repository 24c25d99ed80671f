"""Retrain one stored trial for a few steps and watch its residual stream (reads the database,
writes nothing).

    python docs/results/residual_probe.py --db sqlite:///docs/results/data/findings-dyt-derf.db \\
        --method dyt --model gpt-8l-untied --steps 100 --set optimizer.lr=1e-3

Every `--every` steps, one markdown row: the training loss, the gradient norm before clipping
(of the whole model and of the first block), the RMS of the last block's output and of its
token-mean (the part of the stream that is the same vector at every position of every
sequence), on the trial's fixed diagnostic batch, and the mean cosine similarity between the
input embeddings of the distinct tokens of that batch. A stream whose RMS is all token-mean
carries no information about the input; embeddings whose cosines approach 1 no longer tell
the tokens apart. `--set SECTION.FIELD=
VALUE` changes the stored config (values are read as YAML); `--no-norm-bias` zeroes and freezes
every norm's bias (DyT's LLaMA code has none: github.com/jiachenzhu/DyT,
other_tasks/LLaMA/fms_fsdp/models/llama.py).
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

import torch
import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from harness.diagnostics import global_norm, hidden_states
from harness.methods.layers import blocks
from harness.runner.trial import BuiltTrial, build, prepare, to_device
from harness.store.db import make_engine
from harness.store.models import Trial


def stored_config(db: str, suite: str | None, method: str, model: str, seed: int) -> dict[str, Any]:
    query = select(Trial.config).where(
        Trial.method == method, Trial.model == model, Trial.seed == seed
    )
    if suite is not None:
        query = query.where(Trial.suite == suite)
    with Session(make_engine(db, read_only=True)) as session:
        config = session.execute(query).scalars().first()
    if config is None:
        raise SystemExit(f"no stored trial {method}/{model}/s{seed} in {db}")
    return dict(config)


def setting_value(text: str) -> Any:
    """A `--set` value as YAML reads it, numbers such as 3e-4 included (YAML 1.1 reads them as
    strings)."""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return float(value)
    return value


def apply_settings(config: dict[str, Any], settings: list[str]) -> None:
    for setting in settings:
        path, _, text = setting.partition("=")
        section, _, field = path.partition(".")
        config[section] = {**config[section], field: setting_value(text)}


def freeze_norm_biases(trial: BuiltTrial) -> None:
    for name, parameter in trial.model.named_parameters():
        if "norm" in name and name.endswith("bias"):
            parameter.requires_grad_(False)
            parameter.data.zero_()


@torch.no_grad()
def stream_rms(trial: BuiltTrial) -> tuple[float, float]:
    """RMS of the last block's output and of its mean over batch and positions."""
    top = hidden_states(trial.model, trial.probe_inputs)[-1]
    return top.pow(2).mean().sqrt().item(), top.mean(dim=(0, 1)).pow(2).mean().sqrt().item()


@torch.no_grad()
def embedding_cosine(trial: BuiltTrial) -> float:
    """Mean cosine similarity between the input embeddings of the probe batch's distinct tokens."""
    rows = trial.model.get_input_embeddings().weight[trial.probe_inputs.unique()]
    unit = torch.nn.functional.normalize(rows, dim=-1)
    n = len(unit)
    return ((unit @ unit.T).sum() - n).item() / (n * (n - 1))


def probe(trial: BuiltTrial, steps: int, every: int) -> None:
    generator = torch.Generator().manual_seed(trial.recipe.seed)
    batches = trial.task.train_batches(trial.recipe.train.batch_size, generator)
    clip = trial.recipe.train.grad_clip or float("inf")
    columns = [
        "step",
        "loss",
        "grad norm",
        "block 0 grad norm",
        "stream RMS",
        "token-mean RMS",
        "embedding cosine",
    ]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---:|" * len(columns))
    for step in range(1, steps + 1):
        loss = trial.task.loss(trial.model, to_device(next(batches), trial.device))
        loss.backward()
        first_block = global_norm(
            [p.grad for p in blocks(trial.model)[0].parameters() if p.grad is not None]
        )
        grad_norm = torch.nn.utils.clip_grad_norm_(trial.model.parameters(), clip).item()
        trial.optimizer.step()
        trial.optimizer.zero_grad(set_to_none=True)
        trial.scheduler.step()
        if step % every == 0:
            rms, mean_rms = stream_rms(trial)
            cosine = embedding_cosine(trial)
            print(
                f"| {step} | {loss.item():.3f} | {grad_norm:.3g} | {first_block:.3g} "
                f"| {rms:.3g} | {mean_rms:.3g} | {cosine:.3f} |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--suite")
    parser.add_argument("--method", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE")
    parser.add_argument("--no-norm-bias", action="store_true")
    args = parser.parse_args()
    config = stored_config(args.db, args.suite, args.method, args.model, args.seed)
    apply_settings(config, args.set)
    trial = build(prepare(config))
    if args.no_norm_bias:
        freeze_norm_biases(trial)
    probe(trial, args.steps, args.every)


if __name__ == "__main__":
    main()
