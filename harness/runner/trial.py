"""One trial, run in its own process: build the task and model, train, evaluate, report.

The runner owns the clock (AlgoPerf): train time counts only optimizer steps, never
evaluation. Results go back to the runner, which alone writes to the database.
"""

from __future__ import annotations

import math
import random
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from harness.cache import DataMissingError
from harness.core import Status
from harness.diagnostics import StepProbe, diagnostic_inputs, hidden_state_stats
from harness.diagnostics_geometry import WeightTracker
from harness.diagnostics_pretrained import attention_sinks, pretrained_layer_stats, probe_batch
from harness.logs import detach_stream_handlers
from harness.methods.layers import blocks
from harness.methods.optimizers import make_optimizer
from harness.records import LayerStat, SeriesPoint, TrialResult
from harness.registry import SCHEDULES
from harness.runner.checkpoint import (
    CheckpointError,
    Checkpoints,
    LoopState,
    Training,
    open_checkpoints,
)
from harness.runner.cost import trial_cost
from harness.runner.devices import DeviceUnavailableError, autocast, environment, resolve_device
from harness.runner.distributed import SINGLE, Ranks, in_rank, join, launch, synced, wrap
from harness.runner.finetune import finetune_summary, finetuning_subjects, trainable_params
from harness.runner.posttrain import (
    averaged_draws,
    compress,
    draws,
    task_calibration,
    task_validation,
)
from harness.runner.process import die_with_parent, quiet_libraries
from harness.runner.timing import Clock, tokens_per_s
from harness.runner.warm import prebuilt_task, train_task
from harness.spec.plan import trial_versions
from harness.spec.recipe import TrialKind, TrialRecipe, load_recipe
from harness.tasks.base import Batch, Task
from harness.tasks.corpora import ModelTokenizer
from harness.utils import intra_op_threads

detach_stream_handlers()  # torch's, attached at its import (the fork server imports this module)

Report = Callable[[int, int, float], None]
CALIBRATION_LENGTH = 128  # tokens per calibration window of a pretrained model


class Stop(Exception):
    """Ends training early with a final status (diverged, timeout)."""

    def __init__(self, status: Status, step: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.step = status, step


def seed_everything(seed: int) -> None:
    """Seeds fix model init, data order and dropout."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class BuiltTrial:
    """The objects of one training trial, built from its recipe."""

    recipe: TrialRecipe
    task: Task
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    device: torch.device
    probe_inputs: torch.Tensor
    """The fixed batch on which the layerwise diagnostics look at hidden states."""
    loss: Callable[[nn.Module, Batch], torch.Tensor]
    """The training loss: the task's, compiled if `train.compile` (evaluation stays eager)."""
    tracker: WeightTracker | None = None
    """The blocks' initial weights and spectral-norm vectors, when diagnostics are on."""
    ranks: Ranks = SINGLE
    stepper: nn.Module | None = None
    """The module the training step runs when it is not `model`: DDP around it."""


def prepare(config: Mapping[str, Any]) -> TrialRecipe:
    """The recipe of the trial's config, parsed once (its suite's plugins imported first:
    `load_recipe`), and everything seeded by its seed."""
    recipe = load_recipe(config)
    seed_everything(recipe.seed)
    return recipe


def build(recipe: TrialRecipe) -> BuiltTrial:
    """The task, model, optimizer and schedule of a training trial."""
    ranks, device = join(recipe, resolve_device(recipe.device))
    model_entry, task_entry = recipe.trained_entries()
    task = prebuilt_task(recipe.task) or train_task(task_entry, recipe.task)
    model = model_entry.obj(recipe.model, recipe.model_norm, task.vocab_size).to(device)
    stepper = wrap(model, recipe.train.parallel, ranks)  # FSDP shards before the optimizer
    trial = assemble(recipe, task, model, device)
    trial.ranks, trial.stepper = ranks, stepper
    return trial


def assemble(recipe: TrialRecipe, task: Task, model: nn.Module, device: torch.device) -> BuiltTrial:
    """A training trial of a built task and model: its optimizer, schedule, probe and loss."""
    optimizer = make_optimizer(model, recipe.optimizer)
    train = recipe.train
    schedule = SCHEDULES.get(train.schedule)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: schedule(step, train.steps, train.warmup_steps, train.min_lr_ratio),
    )
    probe_inputs = diagnostic_inputs(task, train.batch_size).to(device)
    loss = torch.compile(task.loss) if recipe.compile else task.loss
    tracker = WeightTracker(blocks(model), recipe.seed) if train.diagnostics else None
    return BuiltTrial(
        recipe, task, model, optimizer, scheduler, device, probe_inputs, loss, tracker
    )


def to_device(batch: Batch, device: torch.device) -> Batch:
    return tuple(tensor.to(device, non_blocking=True) for tensor in batch)


def train_step(
    trial: BuiltTrial, batch: Batch, scaler: torch.amp.GradScaler, probe: StepProbe | None = None
) -> float:
    """One optimizer step on this rank's share of the global `batch`, in micro-batches
    (`train.micro_batch_size`) whose losses are scaled by their share, so that the summed
    gradients are the full batch's; returns the loss before the update (the mean over ranks).
    A probe sees the unscaled, unclipped gradients and the update."""
    micro, count = trial.recipe.train.micro_batches(trial.ranks.world)
    share, stepper = trial.ranks.share(batch), trial.stepper or trial.model
    losses = []
    for index in range(count):
        piece = tuple(t[index * micro : (index + 1) * micro] for t in share) if count > 1 else share
        with synced(stepper, index == count - 1):
            with autocast(trial.device, trial.recipe.precision):
                loss = trial.loss(stepper, piece)
            loss = loss / count if count > 1 else loss
            scaler.scale(loss).backward()
        losses.append(loss.detach())
    scaler.unscale_(trial.optimizer)
    if probe is not None:
        probe.before_step()
    if trial.recipe.train.grad_clip is not None:
        nn.utils.clip_grad_norm_(trial.model.parameters(), trial.recipe.train.grad_clip)
    scaler.step(trial.optimizer)
    scaler.update()
    if probe is not None:
        probe.after_step()
    trial.optimizer.zero_grad(set_to_none=True)
    trial.scheduler.step()
    return trial.ranks.mean(losses[0] if count == 1 else torch.stack(losses).sum())


def check_divergence(loss: float, initial: float, factor: float, step: int) -> None:
    if not math.isfinite(loss):
        raise Stop(Status.DIVERGED, step, f"loss is {loss} at step {step}")
    if loss > factor * initial:
        raise Stop(Status.DIVERGED, step, f"loss {loss:.4g} > {factor} x initial {initial:.4g}")


def evaluate(trial: BuiltTrial, clock: Clock, final: bool) -> dict[str, float]:
    """Evaluation, timed apart from training."""
    start = time.perf_counter()
    train = trial.recipe.train
    with autocast(trial.device, trial.recipe.precision):
        metrics = trial.task.evaluate(trial.model, train.batch_size, train.eval_batches, final)
    clock.eval_s += time.perf_counter() - start
    return metrics


def diagnose(trial: BuiltTrial, probe: StepProbe, step: int, clock: Clock) -> list[LayerStat]:
    """The layerwise statistics of this step (SPEC 5.7), timed as evaluation, not training."""
    start = time.perf_counter()
    stats = probe.stats(step) + hidden_state_stats(trial.model, trial.probe_inputs, step)
    stats += trial.tracker.stats(step) if trial.tracker else []
    clock.train_s -= probe.seconds
    clock.eval_s += probe.seconds + time.perf_counter() - start
    return stats


def train(
    trial: BuiltTrial,
    result: TrialResult,
    clock: Clock,
    report: Report,
    checkpoints: Checkpoints | None = None,
) -> None:
    """The training loop; fills `result` as it goes so a stopped trial keeps its series. With
    `checkpoints`, it resumes from the newest valid one and writes them as their rule says."""
    train_cfg = trial.recipe.train
    generator = torch.Generator().manual_seed(trial.recipe.seed)
    scaler = torch.amp.GradScaler(trial.device.type, enabled=trial.recipe.precision == "fp16")
    loop = LoopState()
    state = Training(
        trial.model,
        trial.optimizer,
        trial.scheduler,
        scaler,
        generator,
        loop,
        result,
        clock,
        trial.tracker,
    )
    first = checkpoints.resume(state) + 1 if checkpoints else 1
    result.steps_done = first - 1
    batches: Iterator[Batch] = trial.task.train_batches(train_cfg.batch_size, generator)
    for step in range(first, train_cfg.steps + 1):
        if trial.ranks.any(clock.wall_s > trial.recipe.time_limit_s):
            raise Stop(Status.TIMEOUT, step - 1, f"time limit {trial.recipe.time_limit_s:g} s")
        batch = to_device(next(batches), trial.device)
        evaluating = step % train_cfg.eval_every == 0 or step == train_cfg.steps
        probing = evaluating and train_cfg.diagnostics
        probe = StepProbe(blocks(trial.model)) if probing else None
        started = time.perf_counter()
        loss = train_step(trial, batch, scaler, probe)
        clock.train_s += time.perf_counter() - started
        result.steps_done, result.tokens = step, result.tokens + trial.task.batch_tokens(batch)
        loop.initial = loss if loop.initial is None else loop.initial
        check_divergence(loss, loop.initial, train_cfg.divergence_factor, step)
        loop.window.append(loss)
        if step % train_cfg.log_every == 0 or step == train_cfg.steps:
            if checkpoints and trial.ranks.lead:
                checkpoints.mark(step)
            report(step, train_cfg.steps, loss)
        if probe is not None:
            result.layer_stats += diagnose(trial, probe, step, clock)
        if evaluating:
            metrics = evaluate(trial, clock, final=False)
            metrics["train_loss"] = sum(loop.window) / len(loop.window)
            loop.window.clear()
            result.series.append(
                SeriesPoint(step, result.tokens, clock.train_s, clock.wall_s, metrics)
            )
        if (
            checkpoints
            and step < train_cfg.steps
            and trial.ranks.any(checkpoints.due(step, evaluating, clock.wall_s))
        ):
            checkpoints.save(step, state, trial.ranks.lead)


def run_trial(
    config: Mapping[str, Any], report: Report | None = None, key: str | None = None
) -> TrialResult:
    """Run the trial of a config (`TrialRecipe.config`) to a final status; never raises for a
    failure of the trial itself. With its trial `key`, a training trial checkpoints and resumes
    from its newest checkpoint (`harness.runner.checkpoint`).

    It runs on the intra-op threads its recipe says (`TrialRecipe.threads`), whoever calls it:
    a backend's worker, a warm fork, or a test in its own process."""
    clock = Clock()
    result = TrialResult(status=Status.RUNNING)
    report = report or (lambda step, total, loss: None)
    try:
        recipe = prepare(config)
        if recipe.ranks > 1 and not in_rank():
            return launch(config, recipe.ranks, report, key)
        with intra_op_threads(recipe.threads):
            if recipe.kind is TrialKind.FINETUNE:
                result.final = finetune(recipe, result, clock, report, key)
            elif recipe.kind.pretrained:
                result.final = evaluate_pretrained(recipe, result, clock)
            else:
                result.final = train_and_evaluate(recipe, result, clock, report, key)
        result.status = Status.DONE
    except Stop as stop:
        result.status, result.failed_step, result.error = stop.status, stop.step, str(stop)
    except (DataMissingError, CheckpointError, DeviceUnavailableError) as reason:
        result.status, result.failed_step, result.error = (
            Status.FAILED,
            result.steps_done,
            str(reason),
        )
    except Exception:
        result.status, result.failed_step = Status.FAILED, result.steps_done
        result.error = traceback.format_exc()
    result.train_time_s, result.eval_time_s, result.wall_time_s = (
        clock.train_s,
        clock.eval_s,
        clock.wall_s,
    )
    return result


def train_and_evaluate(
    recipe: TrialRecipe, result: TrialResult, clock: Clock, report: Report, key: str | None = None
) -> dict[str, float]:
    """Train (from the newest checkpoint of trial `key` if there is one), then prune and
    quantize if the method says so, then the final evaluation."""
    checkpoints = open_checkpoints(key, trial_versions(recipe), recipe.train.checkpoint)
    trial = build(recipe)
    result.environment = environment(trial.device, recipe)
    if trial.ranks.world > 1:
        result.environment |= {"ranks": trial.ranks.world, "parallel": recipe.train.parallel}
    train(trial, result, clock, report, checkpoints)
    cost = training_cost(trial, result, clock)
    if recipe.prune is None and recipe.quantize is None:
        return {**evaluate(trial, clock, final=True), **efficiency(trial, result, clock), **cost}
    started = time.perf_counter()
    calibration = task_calibration(trial.task, recipe, trial.device)
    validation = task_validation(trial.task, recipe)
    if draws(recipe) > 1:  # random criteria: the mean over draws of the same trained model

        def drawn(model: nn.Module) -> dict[str, float]:
            built = replace(trial, model=model)
            return efficiency(built, result, clock) | evaluate(built, clock, final=True)

        found, layers = averaged_draws(
            trial.model, recipe, calibration, result.steps_done, validation, drawn
        )
        result.layer_stats += layers
        return {**found, **cost}
    trial.model, compressed, layers = compress(
        trial.model, recipe, calibration, result.steps_done, validation
    )
    result.layer_stats += layers
    clock.eval_s += time.perf_counter() - started
    return {
        **evaluate(trial, clock, final=True),
        **efficiency(trial, result, clock),
        **cost,
        **compressed,
    }


def finetune(
    recipe: TrialRecipe, result: TrialResult, clock: Clock, report: Report, key: str | None = None
) -> dict[str, float]:
    """Fine-tune a pretrained model as a model trained from scratch is trained (the method's
    optimizer, schedule and layerwise treatment), its task (and `evaluate` lm-eval task)
    evaluated before and after; its `prune` comes first (fine-tuning heals the pruned model),
    its `quantize` last (on the fine-tuned model): `harness.runner.finetune`. Fine-tuning
    checkpoints and resumes as training does (the pretrained model, pruned again, is what the
    checkpoint's state is restored into)."""
    checkpoints = open_checkpoints(key, trial_versions(recipe), recipe.train.checkpoint)
    device = resolve_device(recipe.device)
    result.environment = environment(device, recipe)
    tuning = finetuning_subjects(recipe, device)
    before = tuning.measure(tuning.model)
    pruned, removed = tuning.prune()
    result.layer_stats += removed
    trial = assemble(recipe, tuning.task, tuning.model, device)
    result.layer_stats += attention_sinks(trial.model, trial.probe_inputs, 0)
    train(trial, result, clock, report, checkpoints)
    cost = training_cost(trial, result, clock)
    trainable = trainable_params(trial.model)
    trial.model, quantized, bits = tuning.quantize(trial.model, result.steps_done)
    after = tuning.measure(trial.model)
    result.layer_stats += bits + attention_sinks(trial.model, trial.probe_inputs, result.steps_done)
    result.examples = after.examples
    clock.eval_s += tuning.seconds
    return {
        **after.metrics,
        **efficiency(trial, result, clock),
        **cost,
        **finetune_summary(before.metrics, after.metrics),
        **pruned,
        **quantized,
        "trainable_params": trainable,
    }


def evaluate_pretrained(recipe: TrialRecipe, result: TrialResult, clock: Clock) -> dict[str, float]:
    """Load a pretrained model, prune and quantize it if asked, and evaluate it; no training."""
    device = resolve_device(recipe.device)
    result.environment = environment(device, recipe)
    model_entry, task_entry = recipe.pretrained_entries()
    loaded = model_entry.obj(recipe.model)
    model = loaded.model.to(device)
    task = task_entry.obj(recipe.task, ModelTokenizer(loaded.tokenizer))
    started = time.perf_counter()
    compressing = recipe.prune is not None or recipe.quantize is not None
    samples = recipe.prune.calibration_samples if recipe.prune else 32
    calibration = (
        [batch.to(device) for batch in task.calibration(samples, CALIBRATION_LENGTH)]
        if compressing
        else []
    )
    model, compressed, layers = compress(model, recipe, calibration, 0)
    result.layer_stats += layers
    with torch.no_grad(), autocast(device, recipe.precision):
        evaluation = task.evaluate(model, recipe.train.batch_size)
    result.layer_stats += pretrained_layer_stats(model, probe_batch(task, device))
    clock.eval_s += time.perf_counter() - started
    result.examples = evaluation.examples
    params = float(sum(p.numel() for p in model.parameters()))
    return {**evaluation.metrics, **compressed, "params": params}


def efficiency(trial: BuiltTrial, result: TrialResult, clock: Clock) -> dict[str, float]:
    return {
        "train_loss": result.series[-1].metrics["train_loss"],
        "tokens_per_s": tokens_per_s(result, clock),
        "params": float(sum(p.numel() for p in trial.model.parameters())),
    }


def training_cost(trial: BuiltTrial, result: TrialResult, clock: Clock) -> dict[str, float]:
    """What training cost (`harness.runner.cost`), taken before pruning or quantizing changes
    the model; its devices go into the stored environment."""
    throughput = tokens_per_s(result, clock), trial.probe_inputs.shape[-1]
    recipe = trial.recipe
    cost, devices = trial_cost(
        trial.model, trial.device, recipe.precision, recipe.threads, throughput
    )
    result.environment.update(devices)
    return cost


def trial_process(conn: Any, config: Mapping[str, Any], key: str | None = None) -> None:
    """Entry point of a trial's process: run (resuming trial `key`), stream progress, send the
    result."""
    die_with_parent()
    quiet_libraries()
    progress: Report = lambda step, total, loss: conn.send(("progress", step, total, loss))  # noqa: E731
    result = run_trial(config, progress, key)
    conn.send(("result", result))
    conn.close()
