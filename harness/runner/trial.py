"""One trial, run in its own process: build the task and model, train, evaluate, report.

The runner owns the clock (AlgoPerf): train time counts only optimizer steps, never
evaluation. Results go back to the runner, which alone writes to the database.
"""

from __future__ import annotations

import math
import os
import platform
import random
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from torch import nn

from harness.cache import DataMissingError
from harness.core import Status
from harness.diagnostics import StepProbe, diagnostic_inputs, hidden_state_stats
from harness.diagnostics_geometry import WeightTracker
from harness.diagnostics_pretrained import pretrained_layer_stats, probe_batch
from harness.env import cpu_model, git_commit, package_versions
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
from harness.runner.finetune import finetune_summary, finetuning_subjects, trainable_params
from harness.runner.posttrain import averaged_draws, compress, draws
from harness.runner.process import die_with_parent, quiet_libraries
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


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"device '{name}' was asked for but CUDA is not available here")
    return torch.device(name)


def autocast(device: torch.device, precision: str) -> AbstractContextManager[Any]:
    """Mixed precision by autocast; fp32 runs as is."""
    if precision == "fp32":
        return nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


def environment(device: torch.device, recipe: TrialRecipe) -> dict[str, Any]:
    """What a result depends on besides its config (`method_versions`: the entry and method
    library versions in its key, so `layerbench status` can say which one superseded it)."""
    return {
        **{f"{name}_version": value for name, value in package_versions().items()},
        "method_versions": trial_versions(recipe),
        "python": platform.python_version(),
        "git_commit": git_commit(),
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model(),
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "niceness": os.nice(0),  # a lower priority slows every step beside other work
        "host": platform.node(),
        "numpy_version": np.__version__,
    }


@dataclass
class Clock:
    """Train time (optimizer steps only) and wall time since the trial started."""

    start: float = field(default_factory=time.perf_counter)
    train_s: float = 0.0
    eval_s: float = 0.0

    @property
    def wall_s(self) -> float:
        return time.perf_counter() - self.start


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


def prepare(config: Mapping[str, Any]) -> TrialRecipe:
    """The recipe of the trial's config, parsed once (its suite's plugins imported first:
    `load_recipe`), and everything seeded by its seed."""
    recipe = load_recipe(config)
    seed_everything(recipe.seed)
    return recipe


def build(recipe: TrialRecipe) -> BuiltTrial:
    """The task, model, optimizer and schedule of a training trial."""
    device = resolve_device(recipe.device)
    model_entry, task_entry = recipe.trained_entries()
    task = prebuilt_task(recipe.task) or train_task(task_entry, recipe.task)
    model = model_entry.obj(recipe.model, recipe.model_norm, task.vocab_size).to(device)
    return assemble(recipe, task, model, device)


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
    """One optimizer step; returns the loss before the update. A probe sees the unscaled,
    unclipped gradients and the update."""
    with autocast(trial.device, trial.recipe.precision):
        loss = trial.loss(trial.model, batch)
    scaler.scale(loss).backward()
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
    return loss.item()


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
        if clock.wall_s > trial.recipe.time_limit_s:
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
            if checkpoints:
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
            and checkpoints.due(step, evaluating, clock.wall_s)
        ):
            checkpoints.save(step, state)


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
        with intra_op_threads(recipe.threads):
            if recipe.kind is TrialKind.FINETUNE:
                result.final = finetune(recipe, result, clock, report)
            elif recipe.kind.pretrained:
                result.final = evaluate_pretrained(recipe, result, clock)
            else:
                result.final = train_and_evaluate(recipe, result, clock, report, key)
        result.status = Status.DONE
    except Stop as stop:
        result.status, result.failed_step, result.error = stop.status, stop.step, str(stop)
    except (DataMissingError, CheckpointError) as reason:
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
    train(trial, result, clock, report, checkpoints)
    compressed: dict[str, float] = {}
    if draws(recipe) > 1:  # random criteria: the mean over draws of the same trained model

        def drawn(model: nn.Module) -> dict[str, float]:
            built = replace(trial, model=model)
            return efficiency(built, result, clock) | evaluate(built, clock, final=True)

        calibration, steps = train_calibration(trial), result.steps_done
        found, layers = averaged_draws(
            trial.model, recipe, calibration, steps, validation(trial), drawn
        )
        result.layer_stats += layers
        return found
    if recipe.prune is not None or recipe.quantize is not None:
        started = time.perf_counter()
        trial.model, compressed, layers = compress(
            trial.model,
            recipe,
            train_calibration(trial),
            result.steps_done,
            validation(trial),
        )
        result.layer_stats += layers
        clock.eval_s += time.perf_counter() - started
    return {
        **evaluate(trial, clock, final=True),
        **efficiency(trial, result, clock),
        **compressed,
    }


def finetune(
    recipe: TrialRecipe, result: TrialResult, clock: Clock, report: Report
) -> dict[str, float]:
    """Fine-tune a pretrained model as a model trained from scratch is trained (the method's
    optimizer, schedule and layerwise treatment), its task evaluated before and after."""
    device = resolve_device(recipe.device)
    result.environment = environment(device, recipe)
    trial = assemble(recipe, *finetuning_subjects(recipe, device), device)
    before = evaluate(trial, clock, final=True)
    train(trial, result, clock, report)
    after = evaluate(trial, clock, final=True)
    return {
        **after,
        **efficiency(trial, result, clock),
        **finetune_summary(before, after),
        "trainable_params": trainable_params(trial.model),
    }


def train_calibration(trial: BuiltTrial) -> list[torch.Tensor]:
    """Calibration batches for pruning and quantization: training windows of a fixed stream."""
    samples = trial.recipe.prune.calibration_samples if trial.recipe.prune else 32
    batch_size = trial.recipe.train.batch_size
    batches = trial.task.train_batches(batch_size, torch.Generator().manual_seed(0))
    return [next(batches)[0].to(trial.device) for _ in range(math.ceil(samples / batch_size))]


def validation(trial: BuiltTrial) -> Callable[[nn.Module], float]:
    """The task's validation loss of a candidate model (greedy pruning's objective)."""
    train = trial.recipe.train

    def loss(model: nn.Module) -> float:
        return trial.task.evaluate(model, train.batch_size, train.eval_batches, False)["val_loss"]

    return loss


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
        "tokens_per_s": result.tokens / clock.train_s if clock.train_s else 0.0,
        "params": float(sum(p.numel() for p in trial.model.parameters())),
    }


def trial_process(conn: Any, config: Mapping[str, Any], key: str | None = None) -> None:
    """Entry point of a trial's process: run (resuming trial `key`), stream progress, send the
    result."""
    die_with_parent()
    quiet_libraries()
    progress: Report = lambda step, total, loss: conn.send(("progress", step, total, loss))  # noqa: E731
    result = run_trial(config, progress, key)
    conn.send(("result", result))
    conn.close()
