"""Fine-tuning a pretrained model (trial kind `finetune`): its task in the model's own tokenizer.

A `pretrained` model paired with an `lm` task is fine-tuned by the method's optimizer, schedule
and layerwise treatment (`harness.methods.layerwise`: LISA, layerwise rates, freezing by role,
LoRA through peft), exactly as a model trained from scratch, and evaluated before and after
(`harness.runner.trial.finetune`). The task's tokens are the model's: its corpus tokenized by the
model's tokenizer (`tokenizer: model`), or a dataset prepared with that tokenizer (`layerbench data
prepare NAME --tokenizer smollm2-135m`), checked here against the model's on a probe text.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from harness.data.store import open_dataset
from harness.runner.catalog import BEFORE
from harness.spec.recipe import TrialRecipe
from harness.tasks.base import Task
from harness.tasks.corpora import ModelTokenizer, Tokenizer

PROBE_TEXT = "LayerBench fine-tunes a pretrained model on text in its own tokenizer.\n"
"""The text a prepared dataset's tokenizer must encode as the model's own does."""


def finetuning_subjects(recipe: TrialRecipe, device: torch.device) -> tuple[Task, nn.Module]:
    """The pretrained model (on `device`, in train mode) and its task in the model's tokens."""
    model_entry, task_entry = recipe.finetuned_entries()
    loaded = model_entry.obj(recipe.model)
    tokenizer = ModelTokenizer(loaded.tokenizer)
    dataset = getattr(recipe.task, "dataset", None)
    if dataset is not None:
        check_dataset_tokenizer(dataset, open_dataset(dataset).tokenizer(), tokenizer)
    # an lm task takes the model's tokenizer beside its section (`LMTask`)
    task: Task = task_entry.obj(recipe.task, tokenizer)  # type: ignore[call-arg]
    model: nn.Module = loaded.model
    return task, model.to(device).train()


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


def before_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """The pretrained model's metrics, named as fine-tuning trials store them."""
    return {f"{BEFORE}{name}": value for name, value in metrics.items()}


def finetune_summary(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """The before/after comparison every fine-tuning trial stores."""
    return {**before_metrics(before), "val_loss_gain": before["val_loss"] - after["val_loss"]}
