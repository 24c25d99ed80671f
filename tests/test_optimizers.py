"""Optimizers (SPEC 5.3): in-house update rules against hand-computed steps, library wiring."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from harness.methods.optimizers import make_optimizer
from harness.methods.param_roles import model_layers
from harness.methods.update_rules import RMNP, Muon, SinkGD, sr_sinkhorn
from harness.registry import OPTIMIZERS, SCHEDULES
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from harness.spec.resolve import resolved_optimizer
from harness.spec.sections import NormSpec, OptimizerSpec
from tests import factories
from tests.factories import write_suite


def tiny_gpt(norm: str = "layernorm", **spec: object) -> nn.Module:
    settings = {"n_layers": 2, "d_model": 16, "n_heads": 2, "max_seq_len": 16} | spec
    return factories.tiny_gpt(NormSpec(type=norm), vocab_size=32, **settings)


def backward(model: nn.Module, seed: int = 0) -> None:
    """Gradients of the LM loss on a random batch."""
    tokens = torch.randint(0, 32, (4, 16), generator=torch.Generator().manual_seed(seed))
    model(input_ids=tokens, labels=tokens).loss.backward()


def ids(params: list[torch.Tensor]) -> set[int]:
    return {id(p) for p in params}


def rmnp_by_hand(w: np.ndarray, grads: list[np.ndarray], lr: float, mu: float, wd: float):
    """RMNP's steps from its equations, in numpy."""
    buffer = np.zeros_like(w)
    for g in grads:
        buffer = mu * buffer + g
        u = g + mu * buffer
        u = u / np.linalg.norm(u, axis=1, keepdims=True)
        w = w * (1 - lr * wd) - lr * math.sqrt(max(1, w.shape[0] / w.shape[1])) * u
    return w


def test_rmnp_normalizes_rows_of_the_nesterov_momentum() -> None:
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(6, 4))
    grads = [rng.normal(size=(6, 4)) for _ in range(3)]
    weight = nn.Parameter(torch.tensor(w0))
    optimizer = RMNP([weight], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.05)
    for g in grads:
        weight.grad = torch.tensor(g)
        optimizer.step()
    expected = rmnp_by_hand(w0, grads, lr=0.1, mu=0.9, wd=0.05)
    np.testing.assert_allclose(weight.detach().numpy(), expected, rtol=1e-10)


def sinkhorn_by_hand(g: np.ndarray, iterations: int) -> np.ndarray:
    m, n = g.shape
    for _ in range(iterations):
        g = math.sqrt(n) * g / np.linalg.norm(g, axis=1, keepdims=True)
        g = math.sqrt(m) * g / np.linalg.norm(g, axis=0, keepdims=True)
    return g


def test_sinkgd_alternates_row_and_column_normalization() -> None:
    rng = np.random.default_rng(1)
    w0, g = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    weight = nn.Parameter(torch.tensor(w0))
    weight.grad = torch.tensor(g)
    SinkGD([weight], lr=0.2, iterations=2).step()
    np.testing.assert_allclose(weight.detach().numpy(), w0 - 0.2 * sinkhorn_by_hand(g, 2))
    balanced = sr_sinkhorn(torch.tensor(g), 200)
    np.testing.assert_allclose(balanced.norm(dim=1), math.sqrt(3), rtol=1e-6)
    np.testing.assert_allclose(balanced.norm(dim=0), math.sqrt(5), rtol=1e-6)


def parts(optimizer: torch.optim.Optimizer) -> dict[str, torch.optim.Optimizer]:
    return {type(part).__name__: part for part in optimizer.parts}


def group_params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


@pytest.mark.parametrize("name", ["muon", "rmnp", "sinkgd"])
def test_matrix_optimizers_get_only_hidden_2d_weights_and_adamw_the_rest(name: str) -> None:
    model = tiny_gpt(tie_embeddings=False, pos="learned")
    layers = model_layers(model)
    optimizer = make_optimizer(model, OptimizerSpec(name=name, lr=0.02, weight_decay=0.1))
    by_name = parts(optimizer)
    adamw = by_name.pop("AdamW")
    (matrix_part,) = by_name.values()
    assert ids(group_params(matrix_part)) == ids(layers.hidden_matrices)
    rest = [p for p in model.parameters() if id(p) not in ids(layers.hidden_matrices)]
    assert ids(group_params(adamw)) == ids(rest)
    decay = {id(p): g["weight_decay"] for g in adamw.param_groups for p in g["params"]}
    assert {decay[id(p)] for p in layers.embeddings + layers.head} == {0.1}
    assert {decay[id(p)] for p in rest if p.ndim == 1} == {0.0}
    assert optimizer.param_groups == matrix_part.param_groups + adamw.param_groups


def test_muon_defaults_to_nesterov_momentum_and_takes_the_suite_s() -> None:
    default = parts(make_optimizer(tiny_gpt(), OptimizerSpec(name="muon")))["Muon"].defaults
    assert (default["momentum"], default["nesterov"]) == (0.95, True)
    spec = OptimizerSpec(name="muon", momentum=0.8, nesterov=False, adamw_lr=3e-3)
    chosen = parts(make_optimizer(tiny_gpt(), spec))
    assert (chosen["Muon"].defaults["momentum"], chosen["Muon"].defaults["nesterov"]) == (
        0.8,
        False,
    )
    assert chosen["AdamW"].defaults["lr"] == 3e-3


def test_sinkgd_steps_at_alpha_times_the_adamw_rate() -> None:
    spec = OptimizerSpec(name="sinkgd", lr=1e-3, alpha=0.1, iterations=3)
    optimizer = make_optimizer(tiny_gpt(), spec)
    assert parts(optimizer)["SinkGD"].defaults == {"lr": pytest.approx(1e-4), "iterations": 3}
    assert parts(optimizer)["AdamW"].defaults["lr"] == 1e-3


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("adamw", "AdamW"),
        ("adam", "Adam"),
        ("sgd", "SGD"),
        ("lion", "Lion"),
        ("lamb", "Lamb"),
        ("lars", "LARS"),
        ("novograd", "NovoGrad"),
        ("adafactor", "Adafactor"),
    ],
)
def test_library_optimizers_decay_matrices_only(name: str, cls: str) -> None:
    model = tiny_gpt()
    optimizer = make_optimizer(model, OptimizerSpec(name=name, lr=1e-3, weight_decay=0.1))
    assert type(optimizer).__name__ == cls
    decay = {id(p): g["weight_decay"] for g in optimizer.param_groups for p in g["params"]}
    assert set(decay) == ids(list(model.parameters()))
    assert all(decay[id(p)] == (0.1 if p.ndim >= 2 else 0.0) for p in model.parameters())
    assert {g["lr"] for g in optimizer.param_groups} == {1e-3}


def test_lamb_adds_weight_decay_before_the_trust_ratio() -> None:
    optimizer = make_optimizer(tiny_gpt(), OptimizerSpec(name="lamb", weight_decay=0.1))
    assert all(not g["weight_decouple"] and g["adam_debias"] for g in optimizer.param_groups)


def newton_schulz(g: np.ndarray, steps: int = 5) -> np.ndarray:
    """Muon's quintic Newton-Schulz iteration towards U V^T (Jordan et al., 2024)."""
    a, b, c = 3.4445, -4.7750, 2.0315
    tall = g.shape[0] > g.shape[1]
    x = (g.T if tall else g) / np.linalg.norm(g)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def test_scion_uses_each_layer_type_s_norm() -> None:
    """ColNorm for embeddings, Sign for the head, Spectral for matrices, RMS for vectors."""
    # RMSNorm: LayerNorm's centering leaves gradients a null direction that Newton-Schulz in
    # bfloat16 amplifies noise along, which no float64 reference reproduces.
    model = tiny_gpt("rmsnorm", tie_embeddings=False, pos="learned")
    layers = model_layers(model)
    spec = OptimizerSpec(name="scion", lr=0.01, momentum=0.9)
    optimizer = make_optimizer(model, spec)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    backward(model)
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    optimizer.step()
    # constrained Scion: W <- (1 - lr) W - lr * scale * lmo(0.1 g) (momentum 0.9 from zero)
    update = {
        name: ((1 - 0.01) * before[name] - p.detach()) / 0.01
        for name, p in model.named_parameters()
    }
    head, d_in = grads["lm_head.weight"], 16
    torch.testing.assert_close(update["lm_head.weight"], 10.0 * torch.sign(head) / d_in)
    token = 0.1 * grads["embed_tokens.weight"]
    rms = token.norm(dim=1, keepdim=True) / math.sqrt(16)
    # init() puts the embedding rows at norm sqrt(d): the recovered update loses float32 digits
    expected = token / (rms + 1e-8)
    torch.testing.assert_close(update["embed_tokens.weight"], expected, rtol=1e-3, atol=1e-4)
    hidden = grads["blocks.0.mlp.up_proj.weight"].double().numpy()  # 44 x 16: sqrt(44/16)
    spectral = 3.0 * math.sqrt(44 / 16) * newton_schulz(hidden)
    error = np.linalg.norm(update["blocks.0.mlp.up_proj.weight"].numpy() - spectral)
    assert error < 0.1 * np.linalg.norm(spectral)  # Newton-Schulz runs in bfloat16
    gain = 0.1 * grads["blocks.0.placement.norm1.weight"]
    rms = gain.pow(2).mean().sqrt()
    torch.testing.assert_close(update["blocks.0.placement.norm1.weight"], 3.0 * gain / (rms + 1e-8))
    assert {id(p) for p in layers.embeddings} == ids(
        [model.embed_tokens.weight, model.embed_positions.weight]
    )


def test_scion_starts_every_weight_on_its_norm_ball() -> None:
    """LIONS-EPFL/scion examples/shallow-nanogpt/model.py calls `optimizer.init()`: Spectral
    weights orthogonal times sqrt(d_out/d_in) (no max=True there) times the radius, ColNorm
    embeddings with rows of norm sqrt(d), Sign head +-radius/d_in; our norm gains stay 1."""
    model = tiny_gpt("rmsnorm", tie_embeddings=False, pos="learned")
    make_optimizer(model, OptimizerSpec(name="scion", lr=0.01))
    for name in ("attn.q_proj", "attn.o_proj", "mlp.up_proj", "mlp.down_proj"):
        weight = model.get_submodule(f"blocks.1.{name}").weight.detach().double()
        d_out, d_in = weight.shape
        singular = torch.linalg.svdvals(weight)
        expected = 3.0 * math.sqrt(d_out / d_in)
        torch.testing.assert_close(singular, torch.full_like(singular, expected))
    head = model.lm_head.weight.detach()
    torch.testing.assert_close(head.abs(), torch.full_like(head, 10.0 / 16))
    rows = model.embed_tokens.weight.detach().norm(dim=1)
    torch.testing.assert_close(rows, torch.full_like(rows, 4.0))
    assert torch.equal(model.blocks[0].placement.norm1.weight.detach(), torch.ones(16))


def muon_steps(optimizer_of, grads: list[torch.Tensor], w0: torch.Tensor) -> torch.Tensor:
    weight = nn.Parameter(w0.clone())
    optimizer = optimizer_of([weight])
    for g in grads:
        weight.grad = g.clone()
        optimizer.step()
    return weight.detach()


MUON_SETTINGS = {"lr": 0.02, "weight_decay": 0.1, "momentum": 0.95, "nesterov": True}


@pytest.mark.parametrize("shape", [(24, 10), (10, 24)])
def test_muon_bfloat16_newton_schulz_is_torch_s_step_exactly(shape: tuple[int, int]) -> None:
    torch.manual_seed(0)
    w0, grads = torch.randn(shape), [torch.randn(shape) for _ in range(3)]
    ours = muon_steps(lambda p: Muon(p, torch.bfloat16, **MUON_SETTINGS), grads, w0)
    torch_s = muon_steps(lambda p: torch.optim.Muon(p, **MUON_SETTINGS), grads, w0)
    assert torch.equal(ours, torch_s)


@pytest.mark.parametrize("shape", [(24, 10), (10, 24)])
def test_muon_float32_newton_schulz_is_torch_s_formula_in_float32(shape: tuple[int, int]) -> None:
    """torch/optim/_muon.py `_single_tensor_muon` recomputed in float64 numpy: the float32
    step matches it to float32 precision; torch's bfloat16 step does not."""
    torch.manual_seed(0)
    w0, grads = torch.randn(shape), [torch.randn(shape) for _ in range(3)]
    w, buffer, mu, lr = w0.double().numpy(), np.zeros(shape), 0.95, 0.02
    for g in (g.double().numpy() for g in grads):
        buffer = buffer + (1 - mu) * (g - buffer)  # lerp
        update = g + mu * (buffer - g)  # Nesterov: grad.lerp(buffer, momentum)
        w = w * (1 - lr * 0.1) - lr * math.sqrt(max(1, shape[0] / shape[1])) * newton_schulz(update)
    ours = muon_steps(lambda p: Muon(p, torch.float32, **MUON_SETTINGS), grads, w0)
    np.testing.assert_allclose(ours.double().numpy(), w, rtol=1e-5, atol=1e-6)
    bf16 = muon_steps(lambda p: torch.optim.Muon(p, **MUON_SETTINGS), grads, w0)
    assert np.abs(bf16.double().numpy() - w).max() > 1e-4


def test_ns_dtype_auto_is_bfloat16_on_cuda_and_float32_on_cpu() -> None:
    muon = {"name": "muon", "lr": 0.02}
    for device, cuda, expected in [
        ("cpu", True, "float32"),
        ("cuda:1", False, "bfloat16"),
        ("auto", True, "bfloat16"),
        ("auto", False, "float32"),
    ]:
        assert resolved_optimizer(muon, device, cuda)["ns_dtype"] == expected
    fixed = muon | {"ns_dtype": "bfloat16"}
    assert resolved_optimizer(fixed, "cpu", cuda=False)["ns_dtype"] == "bfloat16"
    assert resolved_optimizer({"name": "adamw"}, "cpu", cuda=False) == {"name": "adamw"}
    muon = parts(make_optimizer(tiny_gpt(), OptimizerSpec(name="muon")))["Muon"]
    assert muon.ns_dtype == torch.float32  # a CPU model
    spec = OptimizerSpec(name="muon", ns_dtype="bfloat16")
    assert parts(make_optimizer(tiny_gpt(), spec))["Muon"].ns_dtype == torch.bfloat16


def test_the_resolved_ns_dtype_is_in_the_trial_config_and_key(tmp_path: Path) -> None:
    methods = """
pre-ln: {device: cpu, optimizer: {name: muon}}
muon-cpu-f32: {device: cpu, optimizer: {name: muon, ns_dtype: float32}}
muon-cpu-bf16: {device: cpu, optimizer: {name: muon, ns_dtype: bfloat16}}
"""
    trials = {t.method: t for t in plan_suite(load_suite(write_suite(tmp_path, methods)))}
    dtypes = {name: t.config["optimizer"]["ns_dtype"] for name, t in trials.items()}
    assert dtypes == {"pre-ln": "float32", "muon-cpu-f32": "float32", "muon-cpu-bf16": "bfloat16"}
    assert trials["pre-ln"].key != trials["muon-cpu-bf16"].key


def test_wsd_warms_up_holds_then_cools_down_over_the_last_fifth() -> None:
    wsd = SCHEDULES.get("wsd")
    values = [wsd(step, 100, 10, 0.0) for step in (4, 10, 50, 80, 90, 100)]
    assert values == pytest.approx([0.5, 1.0, 1.0, 1.0, 0.5, 0.0])
    assert wsd(90, 100, 10, 0.2) == pytest.approx(0.6)


def test_every_optimizer_of_the_spec_is_registered() -> None:
    expected = {"adamw", "adam", "sgd", "lion", "lamb", "lars", "novograd", "adafactor"}
    assert expected | {"muon", "rmnp", "scion", "sinkgd"} <= set(OPTIMIZERS.names())
    assert {"constant", "cosine", "linear", "wsd"} <= set(SCHEDULES.names())
