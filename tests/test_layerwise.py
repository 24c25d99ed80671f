"""Layerwise optimizer wrappers (SPEC 5.4): which layers change, and at which rates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from harness.methods.optimizers import make_optimizer
from harness.methods.param_roles import model_layers
from harness.registry import LAYERWISE, SCHEDULES
from harness.spec import SuiteError, load_suite
from harness.spec.sections import OptimizerSpec
from tests import factories


def tiny_gpt(n_layers: int = 4, **spec: object) -> nn.Module:
    settings = {"n_layers": n_layers, "d_model": 16, "n_heads": 2, "max_seq_len": 16} | spec
    return factories.tiny_gpt(vocab_size=32, **settings)


def step(model: nn.Module, optimizer: torch.optim.Optimizer, seed: int) -> dict[int, torch.Tensor]:
    """One training step; returns each parameter's gradient (by id) before the update."""
    tokens = torch.randint(0, 32, (4, 16), generator=torch.Generator().manual_seed(seed))
    model(input_ids=tokens, labels=tokens).loss.backward()
    grads = {id(p): p.grad.clone() for p in model.parameters() if p.grad is not None}
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return grads


def snapshot(model: nn.Module) -> dict[int, torch.Tensor]:
    return {id(p): p.detach().clone() for p in model.parameters()}


def changed(params: list[nn.Parameter], before: dict[int, torch.Tensor]) -> bool:
    return any(not torch.equal(p.detach(), before[id(p)]) for p in params)


def trains(params: list[nn.Parameter]) -> bool:
    return all(p.requires_grad for p in params)


def layerwise(name: str, **params: object) -> dict[str, object]:
    return {"name": name, **params}


def test_layers_name_the_blocks_and_the_always_on_parts() -> None:
    tied = model_layers(tiny_gpt(3))
    assert len(tied.blocks) == 3 and tied.embeddings == []
    assert len(tied.head) == 1 and len(tied.rest) == 2  # tied table; final norm weight and bias
    untied = tiny_gpt(3, tie_embeddings=False, pos="learned")
    layers = model_layers(untied)
    assert [p.shape for p in layers.embeddings] == [(32, 16), (16, 16)]
    assert layers.head == [untied.lm_head.weight]
    in_blocks = [p for block in layers.blocks for p in block]
    everything = layers.embeddings + layers.head + layers.rest + in_blocks
    assert sorted(map(id, everything)) == sorted(map(id, untied.parameters()))


def test_lisa_changes_only_the_sampled_blocks_and_the_always_on_parts() -> None:
    model = tiny_gpt(4)
    layers = model_layers(model)
    spec = OptimizerSpec(weight_decay=0.1, layerwise=layerwise("lisa", active_layers=2, interval=3))
    optimizer = make_optimizer(model, spec)
    draws = []
    for i in range(9):
        active = {b for b, block in enumerate(layers.blocks) if trains(block)}
        before = snapshot(model)
        step(model, optimizer, seed=i)
        assert len(active) == 2
        assert {b for b, block in enumerate(layers.blocks) if changed(block, before)} == active
        assert changed(layers.head, before) and changed(layers.rest, before)
        draws.append(active)
    assert draws[0] == draws[1] == draws[2] and draws[3] == draws[4] == draws[5]
    assert len({frozenset(draw) for draw in draws}) > 1


def test_drop_updates_a_random_suffix_of_layers_and_keeps_the_others_momentum() -> None:
    model = tiny_gpt(4, tie_embeddings=False, pos="learned")
    layers = model_layers(model)
    units = [layers.embeddings, *layers.blocks, layers.head + layers.rest]
    optimizer = make_optimizer(model, OptimizerSpec(name="muon", layerwise=layerwise("drop")))
    muon = optimizer.parts[0]
    starts = set()
    for i in range(12):
        active = [u for u, params in enumerate(units) if trains(params)]
        before = snapshot(model)
        momentum = {id(p): s["momentum_buffer"].clone() for p, s in muon.state.items()}
        step(model, optimizer, seed=i)
        assert active == list(range(active[0], len(units)))  # a suffix, the head always in it
        assert [u for u, params in enumerate(units) if changed(params, before)] == active
        frozen = [p for params in units[: active[0]] for p in params if id(p) in momentum]
        assert all(torch.equal(muon.state[p]["momentum_buffer"], momentum[id(p)]) for p in frozen)
        starts.add(active[0])
    assert len(starts) > 2


def hill_alpha(weight: np.ndarray) -> float:
    """The power-law alpha of the ESD of W^T W, by hand: Hill over the upper half."""
    eigenvalues = np.sort(np.linalg.svd(weight, compute_uv=False) ** 2)
    tail = eigenvalues[len(eigenvalues) // 2 :]
    return 1 + len(tail) / np.sum(np.log(tail / tail[0]))


def applied_ratio(before: torch.Tensor, after: torch.Tensor, grad: torch.Tensor, lr: float):
    """The LR ratio an SGD step applied: (before - after) = ratio * lr * grad, least squares."""
    step, grad = (before - after).double(), grad.double()
    return float((step * grad).sum() / (lr * grad.pow(2).sum()))


def test_llr_gives_each_matrix_a_rate_linear_in_its_alpha() -> None:
    model = tiny_gpt(2)
    spec = OptimizerSpec(
        name="sgd",
        lr=10.0,
        layerwise=layerwise(
            "llr", lr_min_ratio=0.5, lr_max_ratio=2.0, ramp_steps=2, min_eigenvalues=16
        ),
    )
    optimizer = make_optimizer(model, spec)
    linears = [m for m in model.blocks.modules() if isinstance(m, nn.Linear)]
    alphas = [hill_alpha(m.weight.detach().double().numpy()) for m in linears]
    low, high = min(alphas), max(alphas)
    targets = [0.5 + 1.5 * (a - low) / (high - low) for a in alphas]
    for ramp in (0.5, 1.0):  # the ratios move from 1 to their targets over ramp_steps = 2
        before = snapshot(model)
        grads = step(model, optimizer, seed=0)
        for module, target in zip(linears, targets, strict=True):
            w = module.weight
            ratio = applied_ratio(before[id(w)], w.detach(), grads[id(w)], lr=10.0)
            assert ratio == pytest.approx(1 + (target - 1) * ramp, rel=1e-3)
        norm = model.final_norm.weight
        assert applied_ratio(before[id(norm)], norm.detach(), grads[id(norm)], 10.0) == (
            pytest.approx(1.0, rel=1e-3)
        )
        assert {group["lr"] for group in optimizer.param_groups} == {10.0}


def test_llr_trains_embeddings_and_head_at_the_max_ratio_and_norms_at_one() -> None:
    """hed-ucas/Layer-wise-Learning-Rate olmo/LRUnbalance.py: "embed"/"head" modules get the
    largest alpha, hence lr_max_ratio (ramped like the rest); norms stay in the untuned group."""
    model = tiny_gpt(2, tie_embeddings=False, pos="learned")
    llr = layerwise("llr", lr_min_ratio=1.0, lr_max_ratio=5.0, ramp_steps=2, min_eigenvalues=16)
    optimizer = make_optimizer(model, OptimizerSpec(name="sgd", lr=10.0, layerwise=llr))
    layers = model_layers(model)
    for ramp in (0.5, 1.0):
        before = snapshot(model)
        grads = step(model, optimizer, seed=0)
        for p in [*layers.embeddings, *layers.head]:
            ratio = applied_ratio(before[id(p)], p.detach(), grads[id(p)], lr=10.0)
            assert ratio == pytest.approx(1 + 4 * ramp, rel=1e-3)
        for p in [model.final_norm.weight, model.blocks[0].placement.norm1.weight]:
            assert applied_ratio(before[id(p)], p.detach(), grads[id(p)], 10.0) == (
                pytest.approx(1.0, rel=1e-3)
            )


def test_smooth_stays_absent_until_its_operator_is_defined() -> None:
    """SPEC 5.4's `smooth` (depth-wise gradient smoothing) has no definition we could check."""
    assert "smooth" not in LAYERWISE.names()
    assert {"lr_depth", "llr", "lisa", "drop", "wd_scale"} <= set(LAYERWISE.names())


def test_lr_depth_decays_the_rate_from_the_head_down() -> None:
    model = tiny_gpt(3, tie_embeddings=False, pos="learned")
    layers = model_layers(model)
    spec = OptimizerSpec(name="sgd", lr=10.0, layerwise=layerwise("lr_depth", decay=0.5))
    optimizer = make_optimizer(model, spec)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: SCHEDULES.get("constant")(s, 10, 0, 0.0)
    )
    before = snapshot(model)
    grads = step(model, optimizer, seed=1)
    expected = [(layers.embeddings, 0.5**4), (layers.head + layers.rest, 1.0)]
    expected += [(block, 0.5 ** (3 - i)) for i, block in enumerate(layers.blocks)]
    for params, ratio in expected:
        for p in params:
            assert applied_ratio(before[id(p)], p.detach(), grads[id(p)], 10.0) == pytest.approx(
                ratio, rel=1e-3
            )
    assert sorted(set(scheduler.base_lrs)) == pytest.approx([10 * 0.5**k for k in (4, 3, 2, 1, 0)])


def test_wd_scale_scales_matrix_rates_down_and_their_decay_up_with_width() -> None:
    model = tiny_gpt(2, d_model=64, n_heads=4)
    spec = OptimizerSpec(lr=1e-3, weight_decay=0.1, layerwise=layerwise("wd_scale", base_width=16))
    optimizer = make_optimizer(model, spec)
    hidden = {id(p) for p in model_layers(model).hidden_matrices}
    for group in optimizer.param_groups:
        matrix = {id(p) in hidden for p in group["params"]}
        assert len(matrix) == 1
        if matrix == {True}:
            assert (group["lr"], group["weight_decay"]) == pytest.approx((1e-3 / 4, 0.1 * 2))
        else:
            assert (group["lr"], group["weight_decay"]) == (1e-3, 0.0)


def test_wrapper_parameters_are_validated_with_the_suite(write_suite: Any, tmp_path: Path) -> None:
    methods = "pre-ln: {optimizer: {layerwise: {name: lisa, active_layer: 2}}}"
    with pytest.raises(SuiteError, match="active_layers"):
        load_suite(write_suite(tmp_path, methods))
    methods = "pre-ln: {optimizer: {layerwise: {name: llr, lr_min_ratio: 3, lr_max_ratio: 2}}}"
    with pytest.raises(SuiteError, match="lr_min_ratio must not exceed"):
        load_suite(write_suite(tmp_path, methods))
    ok = "pre-ln: {optimizer: {name: muon, layerwise: {name: drop}}}"
    assert (
        load_suite(write_suite(tmp_path, ok)).methods["pre-ln"].optimizer.layerwise.name == "drop"
    )
