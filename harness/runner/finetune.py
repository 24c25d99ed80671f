"""Fine-tuning a pretrained model (trial kind `finetune`): its task in the model's own tokenizer.

A `pretrained` model paired with an `lm` task is fine-tuned by the method's optimizer, schedule
and layerwise treatment (`harness.methods.layerwise`: LISA, layerwise rates, freezing by role,
LoRA through peft), exactly as a model trained from scratch, and evaluated before and after
(`harness.runner.trial.finetune`). The task's tokens are the model's: its corpus tokenized by the
model's tokenizer (`tokenizer: model`), or a dataset prepared with that tokenizer (`layerbench data
prepare NAME --tokenizer smollm2-135m`), checked here against the model's on a probe text.

Post-training steps compose with fine-tuning in one order: the method's `prune` removes layers
of the pretrained model first, fine-tuning then heals the pruned model, and its `quantize`
quantizes the fine-tuned model (LoRA's adapters merged into the weights first); the model is
evaluated before anything (`before_*`), after pruning (`pruned_*`) and at the end. A method's
`evaluate` adds an lm-eval task (`harness.tasks.lmeval.LMEvalTask`, as the evaluate kind runs it)
to the evaluations before and after.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from harness.data.store import open_dataset
from harness.records import LayerStat
from harness.runner.devices import autocast
from harness.runner.posttrain import prune, quantize, task_calibration, task_validation
from harness.spec.recipe import TrialRecipe
from harness.tasks.base import EvalTask, Evaluation, Task
from harness.tasks.corpora import ModelTokenizer, Tokenizer
from harness.trial_metrics import BEFORE, PRUNED

PROBE_TEXT = "LayerBench fine-tunes a pretrained model on text in its own tokenizer.\n"
"""The text a prepared dataset's tokenizer must encode as the model's own does."""


@dataclass
class FineTuning:
    """A fine-tuning trial's subjects: its task in the model's tokens, the model (on its device,
    in train mode) and the lm-eval task its method adds (`evaluate`), if any."""

    recipe: TrialRecipe
    task: Task
    model: nn.Module
    device: torch.device
    evaluation: EvalTask | None
    seconds: float = 0.0
    """Time spent evaluating, pruning and quantizing (the trial's evaluation time)."""

    def measure(self, model: nn.Module) -> Evaluation:
        """The task's final metrics (val and test) and the lm-eval task's, with its per-example
        outcomes; ValueError when the lm-eval task reports a metric the task reports too."""
        started, train = time.perf_counter(), self.recipe.train
        with autocast(self.device, self.recipe.precision):
            metrics = self.task.evaluate(model, train.batch_size, train.eval_batches, True)
        evaluation = Evaluation(metrics)
        if self.evaluation is not None:
            evaluation = with_lm_eval(evaluation, self.evaluated(model))
        self.seconds += time.perf_counter() - started
        return evaluation

    def evaluated(self, model: nn.Module) -> Evaluation:
        """The lm-eval task's evaluation of `model`, which is left in the mode it was in."""
        assert self.evaluation is not None
        training = model.training
        with torch.no_grad(), autocast(self.device, self.recipe.precision):
            evaluation = self.evaluation.evaluate(model, self.recipe.train.batch_size)
        model.train(training)
        return evaluation

    def prune(self) -> tuple[dict[str, float], list[LayerStat]]:
        """Prune the pretrained model before fine-tuning heals it (the method's `prune`): what
        pruning reports and the task's metrics right after it, prefixed `pruned_`."""
        if self.recipe.prune is None:
            return {}, []
        started = time.perf_counter()
        calibration = task_calibration(self.task, self.recipe, self.device)
        validation = task_validation(self.task, self.recipe)
        self.model, metrics, layers = prune(self.model, self.recipe, calibration, 0, validation)
        self.model.train()
        self.seconds += time.perf_counter() - started
        train = self.recipe.train
        with autocast(self.device, self.recipe.precision):
            pruned = self.task.evaluate(self.model, train.batch_size, train.eval_batches, True)
        return metrics | prefixed(pruned, PRUNED), layers

    def quantize(
        self, model: nn.Module, step: int
    ) -> tuple[nn.Module, dict[str, float], list[LayerStat]]:
        """Quantize the fine-tuned model (the method's `quantize`; LoRA's adapters merged into
        the weights they adapt first), on calibration windows of the task; a pruned model's
        bits and bytes as stored, as a compress trial reports them."""
        if self.recipe.quantize is None and self.recipe.prune is None:
            return model, {}, []
        from harness.methods.layerwise import merge_adapters

        started = time.perf_counter()
        calibration = task_calibration(self.task, self.recipe, self.device)
        quantized = quantize(merge_adapters(model), self.recipe, calibration, step)
        self.seconds += time.perf_counter() - started
        return quantized


def with_lm_eval(task: Evaluation, lm_eval: Evaluation) -> Evaluation:
    """The fine-tuning task's metrics with the lm-eval task's, and the latter's examples."""
    if shared := sorted(set(task.metrics) & set(lm_eval.metrics)):
        raise ValueError(
            f"the `evaluate` lm-eval task reports {shared}, which the fine-tuning task reports "
            "too; evaluate that lm-eval task in a trial of its own"
        )
    return Evaluation(task.metrics | lm_eval.metrics, lm_eval.examples)


def finetuning_subjects(recipe: TrialRecipe, device: torch.device) -> FineTuning:
    """The pretrained model (on `device`, in train mode), its task in the model's tokens and the
    lm-eval task the method adds."""
    model_entry, task_entry = recipe.finetuned_entries()
    loaded = model_entry.obj(recipe.model)
    tokenizer = ModelTokenizer(loaded.tokenizer)
    dataset = getattr(recipe.task, "dataset", None)
    if dataset is not None:
        check_dataset_tokenizer(dataset, open_dataset(dataset).tokenizer(), tokenizer)
    # an lm task takes the model's tokenizer beside its section (`LMTask`)
    task: Task = task_entry.obj(recipe.task, tokenizer)  # type: ignore[call-arg]
    evaluation = None
    if recipe.evaluation is not None:
        entry, section = recipe.evaluation
        evaluation = entry.obj(section, tokenizer)  # type: ignore[call-arg]  # as `LMEvalTask`
    model: nn.Module = loaded.model
    return FineTuning(recipe, task, model.to(device).train(), device, evaluation)


def check_dataset_tokenizer(name: str, dataset: Tokenizer, model: Tokenizer) -> None:
    """ValueError unless the dataset's tokens are the model's (the same ids for a probe text)."""
    if not np.array_equal(dataset.encode(PROBE_TEXT), model.encode(PROBE_TEXT)):
        raise ValueError(
            f"task dataset '{name}' was not tokenized by the fine-tuned model's tokenizer: "
            "prepare it with `layerbench data prepare NAME --tokenizer MODEL`, or use a corpus "
            "with `tokenizer: model`"
        )


def trainable_params(model: nn.Module) -> float:
    """Parameters fine-tuning may update (those requiring gradients at the end: LoRA's adapters,
    the roles a method leaves unfrozen; LISA's always-on parts and last drawn blocks)."""
    return float(sum(p.numel() for p in model.parameters() if p.requires_grad))


def prefixed(metrics: dict[str, float], prefix: str) -> dict[str, float]:
    return {f"{prefix}{name}": value for name, value in metrics.items()}


def finetune_summary(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The before/after comparison every fine-tuning trial stores (the trivial predictor's
    chance levels, which fine-tuning does not change, are stored once, unprefixed)."""
    measured = {name: value for name, value in before.items() if ":" not in name}
    return {**prefixed(measured, BEFORE), "val_loss_gain": before["val_loss"] - after["val_loss"]}
