"""Shared fixtures: tiny suites that train in seconds on the CPU."""

from __future__ import annotations

import os
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from sqlalchemy import create_engine, text
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

ROOT = Path(__file__).resolve().parents[1]
# Ray (tests/test_ray.py, the ray-head service in tests/test_deploy.py) advertises the machine's
# address even when told 127.0.0.1; this Ray knob keeps every Ray of the tests on the loopback.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
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


# The shared helpers as fixtures: tests take them as arguments instead of importing this module.


@pytest.fixture(name="write_suite", scope="session")
def write_suite_fixture() -> Callable[..., Path]:
    """`write_suite(directory, methods, steps=20, eval_every=10, extra="")`."""
    return write_suite


@pytest.fixture(name="tiny_llama", scope="session")
def tiny_llama_fixture() -> Callable[[int, int], LlamaForCausalLM]:
    """`tiny_llama(vocab_size, n_layers)`."""
    return tiny_llama


@pytest.fixture(name="byte_bpe_tokenizer", scope="session")
def byte_bpe_tokenizer_fixture() -> Callable[..., PreTrainedTokenizerFast]:
    """`byte_bpe_tokenizer(texts, vocab_size=400)`."""
    return byte_bpe_tokenizer


@pytest.fixture(name="scipy_percentile_ci", scope="session")
def scipy_percentile_ci_fixture() -> Callable[[list[float]], tuple[float, float]]:
    """`scipy_percentile_ci(values)`: the reference bootstrap CI."""
    return scipy_percentile_ci


@pytest.fixture
def tiny_suite(tmp_path: Path) -> Path:
    return write_suite(tmp_path, "pre-ln: {}\npost-ln: {norm: {placement: post}}")


@pytest.fixture(autouse=True)
def isolated_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test has its own default database and MLflow store, and runs offline."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LAYERBENCH_DB", f"sqlite:///{tmp_path / 'layerbench.db'}")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh database on the local PostgreSQL server, dropped afterwards."""
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"layerbench_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as error:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"PostgreSQL is not reachable at {PG_ADMIN_URL}: {error}")
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    yield url
    create_engine(url).dispose()
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))


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
