"""Fuzzed suites: every mutation of a valid suite validates or exits 2 with file:line, never a
traceback. A small profile here; the campaign runs 1,000+ examples
(`LAYERBENCH_FUZZ_EXAMPLES=1000 pytest tests/test_fuzz_suites.py`, docs/reliability.md)."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tests.factories import invoke

DEFAULT_EXAMPLES = 40
EXAMPLES = int(os.environ.get("LAYERBENCH_FUZZ_EXAMPLES", DEFAULT_EXAMPLES))
BASE = yaml.safe_load(
    """
suite: fuzz
seeds: [0, 1]
defaults:
  time_limit_s: 60
  train: {steps: 10, batch_size: 4, eval_every: 5, eval_batches: 1}
  optimizer: {name: adamw, lr: 1.0e-3}
models:
  g: {type: gpt, n_layers: 3, d_model: 32, n_heads: 2, max_seq_len: 64}
tasks:
  bytes: {type: lm, corpus: shakespeare, tokenizer: byte, seq_len: 32}
  mod: {type: synthetic, kind: modular-addition, modulus: 7}
methods:
  pre: {}
  post: {norm: {placement: post}}
  rms: {extends: pre, norm: {type: rmsnorm}, sweep: {optimizer.lr: [1.0e-3, 2.0e-3]}}
  muon: {optimizer: {name: muon, lr: 0.02}}
  pruned: {prune: {criterion: last_n, n: 1}}
  quant: {quantize: {scheme: rtn, bits: 4, group_size: 8}}
matrix:
  - {methods: [pre, post, rms, muon], models: [g], tasks: [bytes, mod]}
  - {methods: [pruned, quant], models: [g], tasks: [bytes]}
baseline: pre
rank: {metric: val_loss, aggregate: mean_win_rate}
"""
)
ERROR_LINE = re.compile(r"^error: (?P<file>.+?):(?P<line>\d+): ")

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["adamw", "pre", "g", "bytes", "layernorm", "rtn", "ünï", "'; DROP", "1e999"]),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside the suite."""
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += paths(value, (*prefix, index))
    return found


def parent(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        data = data[part]
    return data


@st.composite
def mutated_text(draw: st.DrawFn) -> str:
    data = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        targets = paths(data)
        if not targets:
            break
        path = draw(st.sampled_from(targets))
        holder, key = parent(data, path), path[-1]
        action = draw(st.sampled_from(["drop", "rename", "replace", "reference", "huge"]))
        if action == "drop":
            del holder[key]
        elif action == "rename" and isinstance(holder, dict):
            holder[draw(st.text(max_size=10))] = holder.pop(key)
        elif action == "reference":
            holder[key] = draw(st.sampled_from(["pre", "nope", "g", "bytes", "mod", "prex"]))
        elif action == "huge":
            holder[key] = draw(st.sampled_from([10**400, -(10**400), 1e308, float("inf"), 2**63]))
        else:
            holder[key] = draw(values)
    text = yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
    lines = text.splitlines(keepends=True)
    noise = draw(st.sampled_from(["none", "none", "none", "characters", "duplicate line", "tab"]))
    if noise == "characters":
        at = draw(st.integers(0, len(text)))
        text = (
            text[:at] + draw(st.text(alphabet=":{}[]-#&*!|>'\"%@` \n\tü", max_size=4)) + text[at:]
        )
    elif noise == "duplicate line" and lines:
        at = draw(st.integers(0, len(lines) - 1))
        text = "".join([*lines[: at + 1], lines[at], *lines[at + 1 :]])
    elif noise == "tab" and lines:
        at = draw(st.integers(0, len(lines) - 1))
        text = "".join([*lines[:at], "\t" + lines[at], *lines[at + 1 :]])
    return text


def check_validate(path: Path) -> None:
    """`layerbench validate`: exit 0, or exit 2 with every error at file:line; no traceback."""
    result = invoke("validate", str(path))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code in (0, 2), result.output
    event(f"exit {result.exit_code}")
    if result.exit_code == 2:
        errors = [line for line in result.output.splitlines() if line.startswith("error:")]
        assert errors, result.output
        for line in errors:
            match = ERROR_LINE.match(line)
            assert match and match["file"] == str(path) and int(match["line"]) >= 1, line


@settings(
    max_examples=EXAMPLES,
    # `make test` checks a fixed sample; LAYERBENCH_FUZZ_EXAMPLES (the benchmark run) explores
    derandomize=EXAMPLES == DEFAULT_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(text=mutated_text())
# found by the fuzzer: SwiGLU's default width divided d_model as a float (OverflowError)
@example(
    text=yaml.safe_dump({**BASE, "models": {"g": {**BASE["models"]["g"], "d_model": 10**400}}})
)
def test_every_mutated_suite_validates_or_is_located(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    check_validate(path)


def test_the_unmutated_suite_is_valid(tmp_path: Path) -> None:
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(BASE))
    assert invoke("validate", str(path)).exit_code == 0
