"""Norm types (SPEC 5.2) and norm placements (SPEC 5.1) against their papers' equations."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError
from torch import Tensor, nn

from harness.lazy_registry import UnknownNameError
from harness.methods.catalog import MixParams
from harness.methods.norms import llm_alpha_init
from harness.models.gpt import GPT
from harness.registry import NORM_PLACEMENTS, NORM_TYPES
from harness.spec.sections import NormSpec
from tests.factories import tiny_gpt

DIM, EPS = 16, 1e-5


def randomize(module: nn.Module) -> nn.Module:
    """Give a norm non-trivial parameters, so the tests see every one of them."""
    with torch.no_grad():
        for param in module.parameters():
            param.normal_()
    return module


def make_type(name: str, dim: int = DIM, role: str = "attn", **params: Any) -> nn.Module:
    return NORM_TYPES.get(name)(dim, role, eps=EPS, **params)


@pytest.fixture
def x() -> Tensor:
    torch.manual_seed(0)
    return 3 * torch.randn(4, 7, DIM) + 1


def rms(x: Tensor) -> Tensor:
    return torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS)


@pytest.mark.parametrize("registry", [NORM_PLACEMENTS, NORM_TYPES])
def test_entries_cite_their_papers(registry: Any) -> None:
    for entry in registry.entries():
        assert re.search(r"\(.+(et al\.|&.+), (19|20)\d\d", entry.doc), entry.name


def test_rmsnorm_matches_torch_and_formula(x: Tensor) -> None:
    norm = randomize(make_type("rmsnorm"))
    reference = nn.RMSNorm(DIM, eps=EPS)
    reference.load_state_dict(norm.state_dict())
    torch.testing.assert_close(norm(x), reference(x))
    torch.testing.assert_close(norm(x), x / rms(x) * norm.weight)


def test_layernorm_formula(x: Tensor) -> None:
    norm = randomize(make_type("layernorm"))
    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    formula = (x - mean) / torch.sqrt(var + EPS) * norm.weight + norm.bias
    torch.testing.assert_close(norm(x), formula)


def test_dyt_is_gamma_tanh_alpha_x_plus_beta_with_a_learnable_scalar_alpha(x: Tensor) -> None:
    norm = randomize(make_type("dyt", alpha_init=0.5))
    assert norm.alpha.shape == (1,) and norm.alpha.requires_grad
    assert any(p is norm.alpha for p in norm.parameters())
    torch.testing.assert_close(norm(x), norm.weight * torch.tanh(norm.alpha * x) + norm.bias)
    assert make_type("dyt", alpha_init=0.5).alpha.item() == 0.5


def test_derf_is_gamma_erf_alpha_x_plus_s_plus_beta(x: Tensor) -> None:
    norm = randomize(make_type("derf", alpha_init=0.5, shift_init=0.0))
    assert norm.alpha.shape == norm.shift.shape == (1,)
    inner = (norm.alpha * x + norm.shift).detach()
    erf = torch.tensor([math.erf(v) for v in inner.flatten().tolist()]).view_as(x)
    torch.testing.assert_close(norm(x), norm.weight * erf + norm.bias)


def test_dyt_and_derf_follow_the_papers_language_model_alpha_by_width() -> None:
    assert llm_alpha_init(64, "attn") == llm_alpha_init(64, "mlp") == 1.0
    assert (llm_alpha_init(2048, "attn"), llm_alpha_init(2048, "mlp")) == (1.0, 0.5)
    assert (llm_alpha_init(4096, "attn"), llm_alpha_init(4096, "final")) == (0.8, 0.2)
    assert (llm_alpha_init(8192, "attn"), llm_alpha_init(8192, "mlp")) == (0.2, 0.05)
    for name in ("dyt", "derf"):
        extra = {"shift_init": 0.0} if name == "derf" else {}
        for role, alpha_init, alpha in [("attn", None, 0.8), ("mlp", None, 0.2), ("mlp", 2.0, 2.0)]:
            norm = make_type(name, 4096, role, alpha_init=alpha_init, **extra)
            assert norm.alpha.item() == pytest.approx(alpha)


@pytest.mark.parametrize("name", ["dyt", "derf"])
def test_point_wise_types_scale_embeddings_by_a_learnable_sqrt_d(name: str) -> None:
    model = small_gpt(NormSpec(type=name))
    assert model.embed_scale.item() == pytest.approx(math.sqrt(32))
    ids = torch.randint(0, 37, (2, 5))
    hidden = model(ids, output_hidden_states=True).hidden_states[0]
    torch.testing.assert_close(hidden, model.embed_tokens(ids) * math.sqrt(32))
    assert small_gpt(NormSpec()).embed_scale is None


def test_scalenorm_is_g_x_over_norm_with_g_sqrt_d(x: Tensor) -> None:
    norm = make_type("scalenorm")
    torch.testing.assert_close(norm(x).norm(dim=-1), torch.full(x.shape[:-1], math.sqrt(DIM)))
    with torch.no_grad():
        norm.scale.fill_(2.5)
    torch.testing.assert_close(norm(x), 2.5 * x / x.norm(dim=-1, keepdim=True))


def test_crmsnorm_is_the_rmsnorm_of_the_zero_mean_vector_it_compresses(x: Tensor) -> None:
    norm = randomize(make_type("crmsnorm"))
    formula = x / torch.sqrt(
        (x.pow(2).sum(-1, keepdim=True) + x.sum(-1, keepdim=True) ** 2) / 17 + EPS
    )
    torch.testing.assert_close(norm(x), formula * norm.weight)
    full = torch.cat([x, -x.sum(-1, keepdim=True)], dim=-1)  # zero mean in R^(d+1)
    unit = make_type("crmsnorm")
    torch.testing.assert_close(unit(x), (full / rms(full))[..., :DIM])


def test_seednorm_is_tanh_x_beta_alpha_plus_gamma_times_rmsnorm(x: Tensor) -> None:
    norm = make_type("seednorm")
    torch.testing.assert_close(norm(x), x / rms(x))  # beta = 0 at init: RMSNorm
    randomize(norm)
    gain = torch.tanh((x * norm.beta).sum(-1, keepdim=True)) * norm.alpha + norm.gamma
    torch.testing.assert_close(norm(x), gain * x / rms(x))


def test_identity_type_returns_its_input(x: Tensor) -> None:
    assert torch.equal(make_type("identity")(x), x)


@pytest.mark.parametrize("name", ["layernorm", "rmsnorm", "scalenorm", "crmsnorm", "seednorm"])
def test_norm_eps_is_used(name: str) -> None:
    assert NORM_TYPES.get(name)(DIM, "attn", eps=0.25).eps == 0.25


def fixed_sublayers() -> tuple[nn.Linear, nn.Sequential]:
    """Deterministic stand-ins for the attention and MLP sublayers."""
    torch.manual_seed(1)
    return nn.Linear(DIM, DIM), nn.Sequential(nn.Linear(DIM, DIM), nn.Tanh())


def make_placement(name: str, layer_idx: int = 2, n_layers: int = 5, **params: Any) -> nn.Module:
    roles: list[str] = []

    def make_norm(role: str) -> nn.Module:
        roles.append(role)
        return randomize(nn.LayerNorm(DIM, eps=EPS))

    placement = NORM_PLACEMENTS.get(name)(layer_idx, n_layers, make_norm, **params)
    placement.roles = roles
    return placement


def test_pre_block_equation(x: Tensor) -> None:
    attn, mlp = fixed_sublayers()
    block = make_placement("pre")
    x1 = x + attn(block.norm1(x))
    x2 = x1 + mlp(block.norm2(x1))
    torch.testing.assert_close(block(x, attn, mlp), x2)
    assert block.roles == ["attn", "mlp"]


def test_post_block_equation(x: Tensor) -> None:
    attn, mlp = fixed_sublayers()
    block = make_placement("post")
    x1 = block.norm1(x + attn(x))
    x2 = block.norm2(x1 + mlp(x1))
    torch.testing.assert_close(block(x, attn, mlp), x2)


def test_post_output_is_normalized(x: Tensor) -> None:
    attn, mlp = fixed_sublayers()
    block = NORM_PLACEMENTS.get("post")(0, 1, lambda role: nn.LayerNorm(DIM, eps=EPS))
    y = block(x, attn, mlp)
    torch.testing.assert_close(y.mean(-1), torch.zeros(y.shape[:-1]), atol=1e-5, rtol=0)
    torch.testing.assert_close(
        y.var(-1, unbiased=False), torch.ones(y.shape[:-1]), atol=1e-3, rtol=0
    )


def test_peri_normalizes_each_sublayers_input_and_output(x: Tensor) -> None:
    attn, mlp = fixed_sublayers()
    block = make_placement("peri")
    x1 = x + block.attn_out(attn(block.attn_in(x)))
    x2 = x1 + block.mlp_out(mlp(block.mlp_in(x1)))
    torch.testing.assert_close(block(x, attn, mlp), x2)
    assert len(block.roles) == 4


def test_mix_is_post_ln_on_exactly_the_first_quarter_of_8_layers(x: Tensor) -> None:
    attn, mlp = fixed_sublayers()
    for layer in range(8):
        block = make_placement("mix", layer, 8, post_fraction=0.25)
        n1, n2 = block.norm1, block.norm2
        if layer < 2:
            x1 = n1(x + attn(x))
            expected = n2(x1 + mlp(x1))
        else:
            x1 = x + attn(n1(x))
            expected = x1 + mlp(n2(x1))
        torch.testing.assert_close(block(x, attn, mlp), expected, msg=f"layer {layer}")
    assert MixParams().post_fraction == 0.25
    with pytest.raises(ValidationError):
        MixParams(post_fraction=1.5)


def test_hybrid_post_norms_the_attention_residual_and_keeps_it_for_the_ffn(x: Tensor) -> None:
    attn, mlp = fixed_sublayers()
    block = make_placement("hybrid")
    x1 = block.norm(x + attn(x))
    torch.testing.assert_close(block(x, attn, mlp), x1 + mlp(x1))
    assert NORM_PLACEMENTS.get("hybrid").sublayers.qkv_norm


def test_normformer_block_equation(x: Tensor) -> None:
    attn, mlp = fixed_sublayers()
    block = make_placement("normformer")
    x1 = x + block.attn_out(attn(block.attn_in(x)))
    torch.testing.assert_close(block(x, attn, mlp), x1 + mlp(block.mlp_in(x1)))
    extras = NORM_PLACEMENTS.get("normformer").sublayers
    assert extras.head_scale and extras.ffn_norm and not extras.qkv_norm


@pytest.mark.parametrize(("layer_idx", "scale"), [(0, 1.0), (3, 0.5), (8, 1 / 3)])
def test_lns_scales_the_norm_output_of_layer_l_by_one_over_sqrt_l(
    x: Tensor, layer_idx: int, scale: float
) -> None:
    attn, mlp = fixed_sublayers()
    block = make_placement("lns", layer_idx, 12)
    x1 = x + attn(scale * block.norm1(x))
    torch.testing.assert_close(block(x, attn, mlp), x1 + mlp(scale * block.norm2(x1)))


def test_deepnorm_scales_the_residual_by_alpha(x: Tensor) -> None:
    attn, mlp = fixed_sublayers()
    block = make_placement("deepnorm", n_layers=6)
    alpha = 12**0.25
    x1 = block.norm1(alpha * x + attn(x))
    torch.testing.assert_close(block(x, attn, mlp), block.norm2(alpha * x1 + mlp(x1)))
    assert block.beta == pytest.approx(48**-0.25)


def test_deepnorm_init_is_xavier_normal_with_gain_beta_on_v_out_and_ffn() -> None:
    model = small_gpt(NormSpec(placement="deepnorm"), n_layers=8, d_model=128)
    beta = 64**-0.25
    attn, mlp = model.blocks[5].attn, model.blocks[5].mlp

    def xavier_std(linear: nn.Linear, gain: float) -> float:
        return gain * math.sqrt(2.0 / (linear.in_features + linear.out_features))

    for linear, gain in [
        (attn.q_proj, 1.0),
        (attn.k_proj, 1.0),
        (attn.v_proj, beta),
        (attn.o_proj, beta),
        (mlp.gate_proj, beta),
        (mlp.up_proj, beta),
        (mlp.down_proj, beta),
    ]:
        assert linear.weight.std().item() == pytest.approx(xavier_std(linear, gain), rel=0.05)


def test_none_has_no_norm_modules(x: Tensor) -> None:
    attn, mlp = fixed_sublayers()
    block = make_placement("none")
    x1 = x + attn(x)
    torch.testing.assert_close(block(x, attn, mlp), x1 + mlp(x1))
    assert block.roles == [] and not list(block.parameters())
    model = small_gpt(NormSpec(placement="none"))
    assert not [m for m in model.modules() if isinstance(m, (nn.LayerNorm, nn.RMSNorm))]


def test_final_norm_defaults() -> None:
    with_final = {e.name for e in NORM_PLACEMENTS.entries() if e.obj.final_norm}
    assert with_final == {"pre", "peri", "mix", "hybrid", "normformer", "lns"}


def test_each_placement_builds_its_own_norms() -> None:
    block = make_placement("pre")
    assert block.norm1 is not block.norm2
    assert (block.layer_idx, block.n_layers) == (2, 5)


def test_unknown_placement_suggests_closest() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'pre'") as error:
        NORM_PLACEMENTS.get("pree")
    assert error.value.suggestion == "pre"


def small_gpt(norm: NormSpec, **fields: Any) -> GPT:
    return tiny_gpt(norm, **fields).eval()


def heads(x: Tensor, n: int) -> Tensor:
    return x.unflatten(-1, (n, -1)).transpose(1, 2)


def test_hybrid_attention_normalizes_each_heads_query_key_and_value() -> None:
    model = small_gpt(NormSpec(placement="hybrid", type="rmsnorm"))
    attn = model.blocks[0].attn
    for norm in (attn.q_norm, attn.k_norm, attn.v_norm):
        randomize(norm)
    torch.manual_seed(3)
    x = torch.randn(2, 6, 32)
    q, k, v = (heads(proj(x), 4) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    q, k, v = (
        n.weight * h / rms(h)
        for n, h in zip((attn.q_norm, attn.k_norm, attn.v_norm), (q, k, v), strict=True)
    )
    scores = (q @ k.transpose(-1, -2) / math.sqrt(8)).masked_fill(
        torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf")
    )
    y = (scores.softmax(-1) @ v).transpose(1, 2).flatten(2)
    torch.testing.assert_close(attn(x), attn.o_proj(y))


def test_normformer_scales_heads_before_the_output_projection_and_norms_the_ffn() -> None:
    model = small_gpt(NormSpec(placement="normformer"))
    attn, mlp = model.blocks[1].attn, model.blocks[1].mlp
    assert attn.head_scale.shape == (4,) and torch.equal(attn.head_scale, torch.ones(4))
    randomize(mlp.hidden_norm)
    with torch.no_grad():
        attn.head_scale.copy_(torch.tensor([0.5, 2.0, -1.0, 3.0]))
    torch.manual_seed(4)
    x = torch.randn(2, 6, 32)
    q, k, v = (heads(proj(x), 4) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    per_head = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    scaled = per_head * attn.head_scale[:, None, None]
    torch.testing.assert_close(attn(x), attn.o_proj(scaled.transpose(1, 2).flatten(2)))
    hidden = F.silu(mlp.gate_proj(x)) * mlp.up_proj(x)
    assert mlp.hidden_norm.normalized_shape == (88,)
    torch.testing.assert_close(mlp(x), mlp.down_proj(mlp.hidden_norm(hidden)))


@pytest.mark.parametrize("placement", NORM_PLACEMENTS.names())
@pytest.mark.parametrize("norm_type", ["rmsnorm", "dyt", "seednorm"])
def test_every_placement_trains_in_the_gpt(placement: str, norm_type: str) -> None:
    assert_trains(placement, norm_type)


@pytest.mark.parametrize("norm_type", NORM_TYPES.names())
def test_every_norm_type_trains_in_the_gpt(norm_type: str) -> None:
    assert_trains("pre", norm_type)


def assert_trains(placement: str, norm_type: str) -> None:
    """A training step gives a finite loss and a gradient to every trainable parameter."""
    model = small_gpt(NormSpec(placement=placement, type=norm_type)).train()
    ids = torch.randint(0, 37, (2, 10))
    loss = model(ids, labels=ids).loss
    loss.backward()
    assert loss.isfinite()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
