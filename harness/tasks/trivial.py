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
from harness.tasks.corpora import SPLITS, corpus_fingerprint, lm_splits, model_vocab_size

SYNTHETIC_SETS = ("id", "test", "ood")
"""A synthetic task's evaluation sets (`test` only at the final evaluation); its trivial
predictor is scored on each."""

if TYPE_CHECKING:
    from harness.tasks.catalog import LMTaskSpec, SyntheticTaskSpec

TRIVIAL_SUFFIX = ":trivial"
CACHE_VERSION = "2"
"""Bumped when the computation changes, so older cached levels are not read."""


def trivial_name(metric: str) -> str:
    """The result under which a trial reports `metric`'s trivial level itself (lm-eval)."""
    return f"{metric}{TRIVIAL_SUFFIX}"


COUNT_CHUNK = 1 << 22
"""Tokens counted at a time (a prepared split is memory-mapped: it is never read whole)."""


def token_counts(tokens: np.ndarray, size: int) -> np.ndarray:
    """How often each id below `size` occurs in `tokens` (int64), read `COUNT_CHUNK` at a time."""
    counts = np.zeros(size, dtype=np.int64)
    for start in range(0, len(tokens), COUNT_CHUNK):
        counts += np.bincount(tokens[start : start + COUNT_CHUNK], minlength=size)
    return counts


def unigram_loss(train_counts: np.ndarray, counts: np.ndarray) -> float:
    """Mean cross-entropy (nats per token) of tokens with id counts `counts` under the
    add-one-smoothed unigram distribution of tokens with id counts `train_counts`."""
    smoothed = train_counts.astype(float) + 1.0
    log_p = np.log(smoothed / smoothed.sum())
    return float(-(counts @ log_p) / counts.sum())


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
    vocab_size = model_vocab_size(spec, data)
    counts = {name: token_counts(data.tokens[name], vocab_size) for name in SPLITS}
    byte_lengths = np.zeros(vocab_size, dtype=np.int64)
    byte_lengths[: len(data.byte_lengths)] = data.byte_lengths
    levels: dict[str, float] = {}
    for name in SPLITS:
        loss = unigram_loss(counts["train"], counts[name])
        n_bytes = int(counts[name] @ byte_lengths)
        bits = loss * len(data.tokens[name]) / math.log(2) / n_bytes
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
