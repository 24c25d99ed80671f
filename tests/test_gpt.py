"""The built-in `gpt` model (SPEC 3): shapes, causality, loss, Hub round trip, variants."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM

from harness.lazy_registry import UnknownNameError
from harness.methods.placement import PostNorm, PreNorm
from harness.models.gpt import (
    GPT,
    GPTConfig,
    GPTSpec,
    apply_rope,
    build_gpt,
    norm_field,
    rope_tables,
)
from harness.models.gpt_hf import GPTForCausalLM, as_pretrained
from harness.records import TrialResult
from harness.registry import MODELS, NORM_TYPES
from harness.runner.trial import run_trial
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from harness.spec.sections import NormSpec, ParamsModel
from harness.trial_metrics import MEASURED_METRICS
from tests.factories import tiny_gpt, write_suite

VOCAB, BATCH, SEQ = 37, 2, 12
SMALL = {"n_layers": 2, "d_model": 32, "n_heads": 4, "max_seq_len": 32}


def gpt(norm: NormSpec | None = None, **fields: Any) -> GPT:
    return tiny_gpt(norm, VOCAB, **{**SMALL, **fields}).eval()


@pytest.fixture
def ids() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randint(0, VOCAB, (BATCH, SEQ))


def test_registered_builder_and_auto_classes() -> None:
    assert MODELS.get("gpt") is build_gpt
    assert MODELS.entry("gpt").params is GPTSpec
    config = AutoConfig.for_model("layerbench-gpt", n_layers=1, d_model=32, n_heads=4)
    assert isinstance(config, GPTConfig)
    assert isinstance(AutoModelForCausalLM.from_config(config), GPTForCausalLM)


def test_the_pretrained_face_shares_the_weights_and_mode_of_the_model_it_wraps() -> None:
    model = gpt()
    wrapped = as_pretrained(model)
    assert isinstance(wrapped, GPTForCausalLM) and wrapped.model is model
    assert not wrapped.training
    assert wrapped.get_output_embeddings() is model.lm_head
    assert as_pretrained(wrapped) is wrapped


def test_forward_shapes_and_hidden_states(ids: torch.Tensor) -> None:
    model = gpt()
    out = model(ids, output_hidden_states=True)
    assert out.logits.shape == (BATCH, SEQ, VOCAB)
    assert len(out.hidden_states) == SMALL["n_layers"] + 1
    assert all(h.shape == (BATCH, SEQ, SMALL["d_model"]) for h in out.hidden_states)
    torch.testing.assert_close(model.embed_tokens(ids), out.hidden_states[0])
    last = model.lm_head(model.final_norm(out.hidden_states[-1]))
    torch.testing.assert_close(last, out.logits)
    assert model(ids).hidden_states is None


def test_return_dict_false_gives_tuple(ids: torch.Tensor) -> None:
    loss, logits = as_pretrained(gpt())(ids, labels=ids, return_dict=False)
    assert loss.ndim == 0 and logits.shape == (BATCH, SEQ, VOCAB)


@pytest.mark.parametrize("pos", ["rope", "learned"])
def test_causal(ids: torch.Tensor, pos: str) -> None:
    model, t = gpt(pos=pos), 6
    changed = ids.clone()
    changed[:, t] = (ids[:, t] + 1) % VOCAB
    before, after = model(ids).logits, model(changed).logits
    torch.testing.assert_close(before[:, :t], after[:, :t])
    assert not torch.allclose(before[:, t], after[:, t])


def test_learned_and_rope_differ_in_position_parameters() -> None:
    assert gpt(pos="rope").embed_positions is None
    assert gpt(pos="learned").embed_positions.weight.shape == (SMALL["max_seq_len"], 32)


def test_rope_scores_depend_only_on_offset() -> None:
    torch.manual_seed(2)
    q, k = torch.randn(8), torch.randn(8)
    rope = rope_tables(10, 8, torch.device("cpu"))

    def score(i: int, j: int) -> torch.Tensor:
        rotated_q = apply_rope(q.expand(10, 8), rope)[i]
        rotated_k = apply_rope(k.expand(10, 8), rope)[j]
        return rotated_q @ rotated_k

    torch.testing.assert_close(score(5, 2), score(7, 4))
    assert not torch.allclose(score(5, 2), score(5, 3))


def test_loss_is_shifted_cross_entropy(ids: torch.Tensor) -> None:
    model = gpt()
    labels = ids.clone()
    labels[0, 3:6] = -100
    out = model(ids, labels=labels)
    logits, targets = out.logits[:, :-1], labels[:, 1:]
    keep = targets != -100
    manual = F.cross_entropy(logits[keep], targets[keep])
    torch.testing.assert_close(out.loss, manual)


def train_a_little(model: GPT, ids: torch.Tensor, steps: int = 3) -> GPT:
    """A few AdamW steps, so a checkpoint holds trained (not initial) weights."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(steps):
        model(ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()


def test_trained_checkpoint_round_trip(tmp_path: Path, ids: torch.Tensor) -> None:
    model = gpt(NormSpec(type="rmsnorm", qk_norm=True), n_kv_heads=2)
    initial = model(ids).logits
    train_a_little(model, ids)
    assert not torch.allclose(model(ids).logits, initial)
    as_pretrained(model).save_pretrained(tmp_path)
    reloaded = GPTForCausalLM.from_pretrained(tmp_path).eval()
    auto = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert isinstance(auto, GPTForCausalLM)
    assert auto.config.norm_type == "rmsnorm" and auto.config.n_kv_heads == 2
    expected = model(ids).logits
    assert torch.equal(reloaded(ids).logits, expected)
    assert torch.equal(auto(ids).logits, expected)
    assert auto.model.lm_head.weight is auto.model.embed_tokens.weight


def test_untied_embeddings(tmp_path: Path, ids: torch.Tensor) -> None:
    model = gpt(tie_embeddings=False)
    assert model.lm_head.weight is not model.embed_tokens.weight
    as_pretrained(model).save_pretrained(tmp_path)
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert torch.equal(reloaded(ids).logits, model(ids).logits)


def expected_params(d_model: int, d_ff: int, mlp_matrices: int, kv_dim: int) -> int:
    """Tied embedding + per layer (attention, MLP, two LayerNorms) + final LayerNorm."""
    attention = 2 * d_model * d_model + 2 * d_model * kv_dim
    layer = attention + mlp_matrices * d_model * d_ff + 2 * 2 * d_model
    return VOCAB * d_model + SMALL["n_layers"] * layer + 2 * d_model


def n_params(model: nn.Module) -> int:
    """Distinct parameters' sizes (a tied LM head counts once)."""
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(("mlp", "d_ff", "matrices"), [("swiglu", 88, 3), ("gelu", 128, 2)])
def test_parameter_count_matches_formula(mlp: str, d_ff: int, matrices: int) -> None:
    model = gpt(mlp=mlp)
    assert model.config.d_ff == d_ff
    assert n_params(model) == expected_params(32, d_ff, matrices, kv_dim=32)


def test_default_d_ff() -> None:
    assert GPTConfig(d_model=128, mlp="swiglu").d_ff == 344
    assert GPTConfig(d_model=128, mlp="relu").d_ff == 512
    assert GPTConfig(d_model=128, d_ff=100).d_ff == 100


def test_grouped_query_attention_equals_repeated_heads(ids: torch.Tensor) -> None:
    gqa, mha = gpt(n_kv_heads=2), gpt()
    assert n_params(gqa) == expected_params(32, 88, 3, kv_dim=16)
    state = gqa.state_dict()
    for name, tensor in state.items():
        if name.endswith(("k_proj.weight", "v_proj.weight")):
            state[name] = tensor.unflatten(0, (2, 8)).repeat_interleave(2, dim=0).flatten(0, 1)
    mha.load_state_dict(state)
    torch.testing.assert_close(gqa(ids).logits, mha(ids).logits)


@pytest.mark.parametrize("use_cache", [None, True, False])
def test_generate_appends_greedy_tokens(ids: torch.Tensor, use_cache: bool | None) -> None:
    model = gpt(init_std=0.5)
    prompt = expected = ids[:, :5]
    for _ in range(3):
        expected = torch.cat([expected, model(expected).logits[:, -1:].argmax(-1)], dim=1)
    options = {} if use_cache is None else {"use_cache": use_cache}
    out = as_pretrained(model).generate(prompt, max_new_tokens=3, do_sample=False, **options)
    assert out.shape == (BATCH, 8)
    assert torch.equal(out, expected)


def test_left_padding_is_masked(ids: torch.Tensor) -> None:
    model = gpt()
    padded = torch.cat([torch.zeros(BATCH, 3, dtype=torch.long), ids], dim=1)
    mask = (torch.arange(SEQ + 3) >= 3).long().expand(BATCH, -1)
    torch.testing.assert_close(model(padded, attention_mask=mask).logits[:, 3:], model(ids).logits)


def test_spec_rejects_heads_that_do_not_divide() -> None:
    with pytest.raises(ValidationError, match=r"d_model \(30\) must be divisible by n_heads \(4\)"):
        GPTSpec(d_model=30, n_heads=4)
    with pytest.raises(ValidationError, match="n_kv_heads"):
        GPTSpec(n_heads=4, n_kv_heads=3)
    with pytest.raises(ValidationError):
        GPTSpec(dropout=1.0)


def test_unknown_placement_suggests_closest() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'pre'"):
        gpt(NormSpec(placement="pree"))
    with pytest.raises(UnknownNameError, match="did you mean 'rmsnorm'"):
        gpt(NormSpec(type="rmsnom", final_norm=True))


def test_unknown_norm_field_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"\['alpha_init'\] are not parameters"):
        gpt(NormSpec(alpha_init=0.5))


class ScaledParams(ParamsModel):
    scale: float = 1.0


def scaled_norm(dim: int, role: str, eps: float, scale: float) -> nn.Module:
    """A LayerNorm whose gain starts at `scale` (stands in for dyt, derf and friends)."""
    norm = nn.LayerNorm(dim, eps=eps)
    nn.init.constant_(norm.weight, scale)
    return norm


@pytest.fixture
def scaled_type() -> Iterator[str]:
    with NORM_TYPES.scoped():
        NORM_TYPES.add("scaled", scaled_norm, params=ScaledParams)
        yield "scaled"
    assert "scaled" not in NORM_TYPES


def test_norm_fields_reach_the_norm_factory(scaled_type: str) -> None:
    model = gpt(NormSpec(type=scaled_type, scale=0.5))
    assert model.config.norm_type_params == {"scale": 0.5}
    gains = [model.blocks[0].placement.norm1.weight, model.final_norm.weight]
    assert all(torch.equal(g, torch.full((32,), 0.5)) for g in gains)
    assert torch.equal(gpt(NormSpec(type=scaled_type)).final_norm.weight, torch.ones(32))
    with pytest.raises(ValidationError):
        gpt(NormSpec(type=scaled_type, scale="big"))


def test_placements_and_final_norm(ids: torch.Tensor) -> None:
    post = gpt(NormSpec(placement="post"))
    assert isinstance(post.blocks[0].placement, PostNorm)
    assert isinstance(post.final_norm, nn.Identity)
    pre = gpt(NormSpec(final_norm=False))
    assert isinstance(pre.blocks[1].placement, PreNorm)
    assert isinstance(pre.final_norm, nn.Identity)
    assert isinstance(gpt(NormSpec(placement="post", final_norm=True)).final_norm, nn.LayerNorm)
    assert post(ids).logits.isfinite().all()


def test_qk_norm_normalizes_each_head() -> None:
    attn = gpt(NormSpec(qk_norm=True)).blocks[0].attn
    assert isinstance(attn.q_norm, nn.LayerNorm) and attn.q_norm.normalized_shape == (8,)
    assert isinstance(gpt().blocks[0].attn.k_norm, nn.Identity)


def test_init_scales_residual_outputs() -> None:
    model = gpt(n_layers=8, d_model=128, init_std=0.05, bias=True)
    block = model.blocks[3]
    scaled = 0.05 / math.sqrt(2 * 8)
    assert block.attn.q_proj.weight.std().item() == pytest.approx(0.05, rel=0.05)
    assert block.attn.o_proj.weight.std().item() == pytest.approx(scaled, rel=0.05)
    assert block.mlp.down_proj.weight.std().item() == pytest.approx(scaled, rel=0.05)
    assert model.embed_tokens.weight.std().item() == pytest.approx(0.05, rel=0.1)
    assert torch.count_nonzero(block.mlp.up_proj.bias) == 0


def test_dropout_only_in_training(ids: torch.Tensor) -> None:
    model = gpt(dropout=0.5)
    assert torch.equal(model(ids).logits, model(ids).logits)
    model.train()
    assert not torch.equal(model(ids).logits, model(ids).logits)


def test_bf16_autocast_close_to_fp32(ids: torch.Tensor) -> None:
    model = gpt(NormSpec(qk_norm=True))
    fp32 = model(ids, labels=ids).loss
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf16 = model(ids, labels=ids)
    assert bf16.logits.dtype == torch.bfloat16
    assert bf16.loss.item() == pytest.approx(fp32.item(), abs=0.05)


def test_too_long_sequence_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="exceeds max_seq_len 32"):
        gpt()(torch.zeros(1, 33, dtype=torch.long))


def test_config_fields_are_derived_from_the_model_and_norm_sections() -> None:
    """Every `GPTSpec` field but `type` and every `NormSpec` field is a `GPTConfig` field with
    the section's default (a field added to a section reaches the model's configuration)."""
    fields = {f.name: f.default for f in dataclasses.fields(GPTConfig)}
    spec = {name: info.default for name, info in GPTSpec.model_fields.items() if name != "type"}
    norm = {norm_field(name): info.default for name, info in NormSpec.model_fields.items()}
    assert {**spec, **norm}.items() <= fields.items()
    assert set(fields) - set(spec) - set(norm) == {
        "vocab_size",
        "placement_params",
        "norm_type_params",
        "output_hidden_states",
    }


def test_config_keeps_the_spec_and_norm_fields() -> None:
    config = gpt(NormSpec(type="rmsnorm", eps=1e-6), pos="learned").config
    assert isinstance(config, GPTConfig)
    assert (config.pos, config.norm_type, config.norm_eps, config.vocab_size) == (
        "learned",
        "rmsnorm",
        1e-6,
        VOCAB,
    )
    assert config.hidden_size == 32 and config.num_hidden_layers == 2
    assert config.tie_word_embeddings is True and config.final_norm is True


# What the default-shape trials of `test_rope_cache_stores_what_the_uncached_model_stored` stored
# before the RoPE tables were cached (commit a837530, torch 2.13.0+cpu, 1 thread): the final and
# step-3 losses as float.hex(), by the CPU they were recorded on (`cpu_kind`). The last digits
# depend on the CPU's kernels (oneDNN's bf16 and fp32 paths differ between Xeons with and without
# AMX, and between AMX Xeons), so they are compared on the recording CPU only; everywhere the
# cached and uncached models must store the same digits. The first recording, on an AMX Xeon whose
# model and flags were not kept, was replaced by this one (2026-12-03): a837530 and f37493c
# store these same digits on this CPU (`cpu_kind` below), from the same trial configs.
RECORDED_BY_CPU = {
    ("2.13.0+cpu", "AVX512", "6/167/1", "amx_bf16 avx512_bf16 avx512_fp16"): {
        "pre-ln": {
            "train_loss": ("0x1.5cf2695555555p+2", "0x1.4688beaaaaaabp+2"),
            "val_loss": ("0x1.4c63e90000000p+2", "0x1.40130d0000000p+2"),
            "test_loss": "0x1.3eb1ef0000000p+2",
        },
        "bf16": {
            "train_loss": ("0x1.5cf21caaaaaabp+2", "0x1.4687735555555p+2"),
            "val_loss": ("0x1.4c63a30000000p+2", "0x1.4011c30000000p+2"),
            "test_loss": "0x1.3eb2bd0000000p+2",
        },
    },
}


def cpu_kind() -> tuple[str, str, str, str]:
    """torch's version and CPU kernels, the CPU's family/model/stepping and its bf16 and fp16
    instruction flags (from /proc/cpuinfo; empty where there is none)."""
    cpuinfo = Path("/proc/cpuinfo")
    fields: dict[str, str] = {}
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            name, _, value = line.partition(":")
            fields.setdefault(name.strip(), value.strip())
    model = "/".join(fields.get(name, "") for name in ("cpu family", "model", "stepping"))
    flags = " ".join(
        sorted(f for f in fields.get("flags", "").split() if f.endswith(("_bf16", "_fp16")))
    )
    return torch.__version__, torch.backends.cpu.get_cpu_capability(), model, flags


def uncached_rope(model: GPT, seq_len: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The tables as the model computed them in every forward before they were cached."""
    return rope_tables(seq_len, model.config.d_model // model.config.n_heads, device)


def stored(result: TrialResult) -> tuple[object, ...]:
    """What the store keeps of a trial, less its timings and environment."""
    final = {name: value for name, value in result.final.items() if name not in MEASURED_METRICS}
    series = [(point.step, point.metrics) for point in result.series]
    return result.status, final, series, result.layer_stats, result.steps_done, result.tokens


def recorded_losses(result: TrialResult) -> dict[str, object]:
    """The losses `RECORDED_BY_CPU` keeps, as float.hex()."""
    series = [point.metrics for point in result.series]
    return {
        "train_loss": tuple(metrics["train_loss"].hex() for metrics in series),
        "val_loss": tuple(metrics["val_loss"].hex() for metrics in series),
        "test_loss": result.final["test_loss"].hex(),
    }


@pytest.mark.slow
def test_rope_cache_stores_what_the_uncached_model_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Default shape (RoPE, SwiGLU), fp32 and bf16: the trials store, to the last digit, what
    they store with the tables computed in every forward, and what they stored before."""
    suite = write_suite(tmp_path, "pre-ln: {}\nbf16: {precision: bf16}", steps=6, eval_every=3)
    trials = [trial for trial in plan_suite(load_suite(suite)) if trial.seed == 0]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cached = {trial.method: run_trial(trial.config) for trial in trials}
        monkeypatch.setattr(GPT, "rope", uncached_rope)
        uncached = {trial.method: run_trial(trial.config) for trial in trials}
    finally:
        torch.set_num_threads(threads)
    assert set(cached) == {"pre-ln", "bf16"}
    for method, result in cached.items():
        assert result.status == "done"
        assert stored(result) == stored(uncached[method])
    recorded = RECORDED_BY_CPU.get(cpu_kind())
    if recorded is not None:
        assert {method: recorded_losses(result) for method, result in cached.items()} == recorded
