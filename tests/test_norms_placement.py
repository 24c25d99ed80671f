"""Norm types (SPEC 5.2) and norm placements (SPEC 5.1) against their equations."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from harness.registry import NORM_PLACEMENTS, NORM_TYPES, UnknownNameError

DIM, EPS = 16, 1e-5


def randomize(module: nn.Module) -> nn.Module:
    """Give a norm non-trivial affine parameters, so the tests see the gain and bias."""
    with torch.no_grad():
        for param in module.parameters():
            param.normal_()
    return module


@pytest.fixture
def x() -> Tensor:
    torch.manual_seed(0)
    return 3 * torch.randn(4, 7, DIM) + 1


def test_rmsnorm_matches_torch_and_formula(x: Tensor) -> None:
    norm = randomize(NORM_TYPES.get("rmsnorm")(DIM, eps=EPS))
    reference = nn.RMSNorm(DIM, eps=EPS)
    reference.load_state_dict(norm.state_dict())
    formula = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * norm.weight
    torch.testing.assert_close(norm(x), reference(x))
    torch.testing.assert_close(norm(x), formula)


def test_layernorm_formula(x: Tensor) -> None:
    norm = randomize(NORM_TYPES.get("layernorm")(DIM, eps=EPS))
    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    formula = (x - mean) / torch.sqrt(var + EPS) * norm.weight + norm.bias
    torch.testing.assert_close(norm(x), formula)


def test_norm_eps_is_used() -> None:
    assert NORM_TYPES.get("layernorm")(DIM, eps=0.25).eps == 0.25
    assert NORM_TYPES.get("rmsnorm")(DIM, eps=0.25).eps == 0.25


def test_norm_entries_cite_their_papers() -> None:
    assert {"layernorm", "rmsnorm"} <= set(NORM_TYPES.names())
    assert "Ba et al." in NORM_TYPES.entry("layernorm").doc
    assert "Zhang & Sennrich" in NORM_TYPES.entry("rmsnorm").doc


def fixed_sublayers() -> tuple[nn.Linear, nn.Sequential]:
    """Deterministic stand-ins for the attention and MLP sublayers."""
    torch.manual_seed(1)
    return nn.Linear(DIM, DIM), nn.Sequential(nn.Linear(DIM, DIM), nn.Tanh())


def make_placement(name: str, layer_idx: int = 2, n_layers: int = 5) -> nn.Module:
    def make_norm() -> nn.Module:
        return randomize(nn.LayerNorm(DIM, eps=EPS))

    return NORM_PLACEMENTS.get(name)(layer_idx, n_layers, make_norm)


def test_pre_block_equation(x: Tensor) -> None:
    attn, mlp = fixed_sublayers()
    block = make_placement("pre")
    x1 = x + attn(block.norm1(x))
    x2 = x1 + mlp(block.norm2(x1))
    torch.testing.assert_close(block(x, attn, mlp), x2)


def test_post_block_equation(x: Tensor) -> None:
    attn, mlp = fixed_sublayers()
    block = make_placement("post")
    x1 = block.norm1(x + attn(x))
    x2 = block.norm2(x1 + mlp(x1))
    torch.testing.assert_close(block(x, attn, mlp), x2)


def test_post_output_is_normalized(x: Tensor) -> None:
    attn, mlp = fixed_sublayers()
    block = NORM_PLACEMENTS.get("post")(0, 1, lambda: nn.LayerNorm(DIM, eps=EPS))
    y = block(x, attn, mlp)
    torch.testing.assert_close(y.mean(-1), torch.zeros(y.shape[:-1]), atol=1e-5, rtol=0)
    torch.testing.assert_close(
        y.var(-1, unbiased=False), torch.ones(y.shape[:-1]), atol=1e-3, rtol=0
    )


def test_each_placement_builds_its_own_norms() -> None:
    block = make_placement("pre")
    assert block.norm1 is not block.norm2
    assert (block.layer_idx, block.n_layers) == (2, 5)


def test_final_norm_defaults() -> None:
    assert NORM_PLACEMENTS.get("pre").final_norm is True
    assert NORM_PLACEMENTS.get("post").final_norm is False


def test_placement_entries_cite_their_papers() -> None:
    assert "Xiong et al." in NORM_PLACEMENTS.entry("pre").doc
    assert "Vaswani et al." in NORM_PLACEMENTS.entry("post").doc


def test_unknown_placement_suggests_closest() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'pre'") as error:
        NORM_PLACEMENTS.get("pree")
    assert error.value.suggestion == "pre"
