"""The level of each task's trivial predictor: a model that learned nothing about the inputs.

A method whose metric is not better than this level "stays at the trivial predictor": it did
not train. `harness.claims` uses it to call a claim between two such methods
degenerate (not tested) instead of reading noise around that level as a difference.

- `lm`: the unigram predictor of the training split (token frequencies with add-one smoothing),
  scored on each split's tokens: `train_loss`, `val_loss`, `test_loss` (nats per token), their
  perplexities and bits per byte. Computed once per corpus, tokenizer and split, and cached
  under the data fingerprint (`cache_dir()/trivial/`).
- `synthetic`: the chance level, a uniform guess among the kind's answer classes (loss
  log(classes), accuracy 1/classes) on every evaluation set.
- `lm-eval`: chance accuracy, reported by the trial itself (`trivial_name("acc")`): the mean
  over the examples of 1 / their number of choices.

Torch-free: ranking calls it through the task registry (`TrainTaskEntry.trivial`).
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import TYPE_CHECKING

import numpy as np

from harness.cache import cache_dir
from harness.registry import SYNTHETIC_KINDS
from harness.tasks.corpora import SPLITS, corpus_fingerprint, lm_splits

SYNTHETIC_SETS = ("id", "test", "ood")
"""A synthetic task's evaluation sets (`test` only at the final evaluation); its trivial
predictor is scored on each."""

if TYPE_CHECKING:
    from harness.tasks.catalog import LMTaskSpec, SyntheticTaskSpec

TRIVIAL_SUFFIX = ":trivial"
CACHE_VERSION = "1"
"""Bumped when the computation changes, so older cached levels are not read."""


def trivial_name(metric: str) -> str:
    """The result under which a trial reports `metric`'s trivial level itself (lm-eval)."""
    return f"{metric}{TRIVIAL_SUFFIX}"


def unigram_loss(train: np.ndarray, tokens: np.ndarray, vocab_size: int) -> float:
    """Mean cross-entropy (nats per token) of `tokens` under the add-one-smoothed unigram
    distribution of `train`."""
    counts = np.bincount(train, minlength=vocab_size).astype(float) + 1.0
    log_p = np.log(counts / counts.sum())
    return float(-log_p[tokens].mean())


def lm_trivial(spec: LMTaskSpec) -> dict[str, float]:
    """The unigram predictor's metrics of an `lm` task (see the module doc), cached."""
    identity = {
        "version": CACHE_VERSION,
        "data": corpus_fingerprint(spec),
        **spec.model_dump(),
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    path = cache_dir() / "trivial" / f"{digest}.json"
    if path.exists():
        return {k: float(v) for k, v in json.loads(path.read_text()).items()}
    levels = _lm_levels(spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(levels, indent=1))
    return levels


def _lm_levels(spec: LMTaskSpec) -> dict[str, float]:
    data = lm_splits(spec)
    tokens = data.tokens
    vocab_size = spec.vocab_size or data.vocab_size
    levels: dict[str, float] = {}
    for name in SPLITS:
        loss = unigram_loss(tokens["train"], tokens[name], vocab_size)
        n_bytes = int(data.byte_lengths[tokens[name]].sum())
        bits = loss * len(tokens[name]) / math.log(2) / n_bytes
        prefix = "" if name == "val" else f"{name}_"
        levels |= {f"{name}_loss": loss, f"{name}_ppl": math.exp(loss)}
        if name != "train":
            levels[f"{prefix}bits_per_byte"] = bits
    return levels


def synthetic_trivial(spec: SyntheticTaskSpec) -> dict[str, float]:
    """Chance level of a synthetic task: a uniform guess among its answer classes; empty when
    its kind declares no number of classes."""
    count = SYNTHETIC_KINDS.entry(spec.kind).classes
    if count is None:
        return {}
    classes = count(spec.kind_params())
    levels = {"val_loss": math.log(classes)}
    for split in SYNTHETIC_SETS:
        levels |= {f"{split}_loss": math.log(classes), f"{split}_acc": 1.0 / classes}
    return levels
