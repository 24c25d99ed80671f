"""Helpers the tests share: the repository root, tiny suite files, a tiny Llama and tokenizer, and
the reference bootstrap interval. Plain functions, imported (`from tests.helpers import ...`);
conftest.py also offers them as fixtures."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parents[1]
PG_ADMIN_URL = os.environ.get(
    "LAYERBENCH_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)

TINY_SUITE = """\
suite: tiny
seeds: [0, 1]
defaults:
  time_limit_s: 120
  train:
    {{steps: {steps}, batch_size: 8, warmup_steps: 2, eval_every: {eval_every}, eval_batches: 2}}
  optimizer: {{name: adamw, lr: 3.0e-3}}
models:
  gpt-2l: {{type: gpt, n_layers: 2, d_model: 32, n_heads: 2, max_seq_len: 64}}
tasks:
  bytes: {{type: lm, corpus: shakespeare, tokenizer: byte, seq_len: 32}}
methods:
{methods}
baseline: pre-ln
"""


def write_suite(
    directory: Path, methods: str, steps: int = 20, eval_every: int = 10, extra: str = ""
) -> Path:
    """A tiny suite file; `methods` is the YAML body of the `methods` section."""
    path = directory / "suite.yaml"
    body = TINY_SUITE.format(
        steps=steps, eval_every=eval_every, methods=textwrap.indent(methods.strip(), "  ")
    )
    path.write_text(body + extra)
    return path


def byte_bpe_tokenizer(texts: list[str], vocab_size: int = 400) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained here on `texts` (nothing is downloaded)."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<eos>", pad_token="<eos>")


def tiny_llama(vocab_size: int, n_layers: int) -> LlamaForCausalLM:
    """A randomly initialised Llama small enough for a unit test."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=n_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=0,
        pad_token_id=0,
        bos_token_id=0,
    )
    return LlamaForCausalLM(config).eval()


def scipy_percentile_ci(values: list[float]) -> tuple[float, float]:
    """The 95% percentile-bootstrap CI of the mean as scipy computes it (ranking's reference)."""
    from scipy import stats

    interval = stats.bootstrap(
        (np.array(values),),
        np.mean,
        method="percentile",
        n_resamples=2000,
        rng=np.random.default_rng(0),
    ).confidence_interval
    return interval.low, interval.high
