"""Methods as their authors ran them (issue 11): Peri-LN's embedding norm, the `model.init`
profiles, DyT/Derf alpha_0 from the model width."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from harness.models.gpt import GPT, GPTSpec, build_gpt
from harness.registry import NORM_PLACEMENTS
from harness.spec.recipe import model_norm
from harness.spec.sections import NormSpec
from tests.factories import tiny_gpt

VOCAB = 37


def small_gpt(norm: NormSpec, **fields: Any) -> GPT:
    return tiny_gpt(norm, VOCAB, **fields).eval()


def test_peri_ln_normalizes_the_embeddings_by_default() -> None:
    """Kim et al. 2025, Sec. 3: y_0 = Norm(x_embed); the embedding output has zero mean and unit
    variance per token (a LayerNorm with its initial gain and bias)."""
    model = small_gpt(NormSpec(placement="peri"))
    ids = torch.randint(0, VOCAB, (2, 9))
    y0 = model(ids, output_hidden_states=True).hidden_states[0]
    raw = model.embed_tokens(ids)
    torch.testing.assert_close(y0, F.layer_norm(raw, (32,), eps=1e-5))
    assert y0.std(-1, unbiased=False).mean().item() == pytest.approx(1.0, abs=0.03)  # eps
    assert raw.std().item() < 0.05  # the raw embeddings are std 0.02


def test_peri_ln_embedding_keeps_its_weight_in_the_residual_stream() -> None:
    """With y_0 = N(x_embed) the first block's output branch (also normalized) no longer swamps
    the embedding: cos(embedding, stream after block 1) stays far from 0 (it was ~0.05)."""
    model = small_gpt(NormSpec(placement="peri"), n_layers=4, d_model=64)
    ids = torch.randint(0, VOCAB, (4, 16))
    hidden = model(ids, output_hidden_states=True).hidden_states
    cos = F.cosine_similarity(hidden[0], hidden[1], dim=-1).mean().item()
    assert cos > 0.4
    off = small_gpt(NormSpec(placement="peri", embed_norm=False), n_layers=4, d_model=64)
    hidden_off = off(ids, output_hidden_states=True).hidden_states
    assert F.cosine_similarity(hidden_off[0], hidden_off[1], dim=-1).mean().item() < 0.2


def test_embed_norm_is_off_elsewhere_and_can_be_switched() -> None:
    with_embed_norm = {n for n in NORM_PLACEMENTS.names() if NORM_PLACEMENTS.get(n).embed_norm}
    assert with_embed_norm == {"peri"}
    assert isinstance(small_gpt(NormSpec()).embed_norm, nn.Identity)
    assert isinstance(small_gpt(NormSpec(embed_norm=True)).embed_norm, nn.LayerNorm)
    model = small_gpt(NormSpec(placement="peri", embed_norm=False))
    assert isinstance(model.embed_norm, nn.Identity) and model.config.embed_norm is False


def init_stds(norm: NormSpec, init: str) -> dict[str, float]:
    model = small_gpt(norm, n_layers=8, d_model=128, init=init)
    block = model.blocks[5]
    return {
        "q": block.attn.q_proj.weight.std().item(),
        "v": block.attn.v_proj.weight.std().item(),
        "o": block.attn.o_proj.weight.std().item(),
        "down": block.mlp.down_proj.weight.std().item(),
        "up": block.mlp.up_proj.weight.std().item(),
        "embed": model.embed_tokens.weight.std().item(),
    }


@pytest.mark.parametrize("placement", ["lns", "mix"])
def test_paper_init_of_lns_and_mix_is_std_002_everywhere(placement: str) -> None:
    """lmsdss/LayerNorm-Scaling, peft_pretraining/modeling_llama.py `_init_weights`: normal(0,
    0.02) on every nn.Linear and nn.Embedding, no 1/sqrt(2L) for `LNS` and `post_pre`."""
    paper = init_stds(NormSpec(placement=placement), "paper")
    for name in ("q", "v", "o", "down", "up", "embed"):
        assert paper[name] == pytest.approx(0.02, rel=0.06), name
    gpt2 = init_stds(NormSpec(placement=placement), "gpt2")
    for name in ("o", "down"):
        assert gpt2[name] == pytest.approx(0.02 / math.sqrt(16), rel=0.06), name
    assert gpt2["q"] == pytest.approx(0.02, rel=0.06)


def test_paper_init_is_gpt2_where_the_authors_used_gpt2() -> None:
    for placement in ("pre", "peri"):
        paper, gpt2 = (init_stds(NormSpec(placement=placement), p) for p in ("paper", "gpt2"))
        assert paper == gpt2


def test_unscaled_init_drops_the_residual_scaling_for_every_placement() -> None:
    """The LayerNorm Scaling / Mix-LN authors' Pre-LN and Post-LN baselines (`pre`, `post` in
    lmsdss/LayerNorm-Scaling) train with their methods' normal(0, 0.02) init, not GPT-2's."""
    for placement in ("pre", "post", "lns", "mix"):
        unscaled = init_stds(NormSpec(placement=placement), "unscaled")
        for name in ("q", "v", "o", "down", "up", "embed"):
            assert unscaled[name] == pytest.approx(0.02, rel=0.06), (placement, name)
    assert init_stds(NormSpec(placement="lns"), "unscaled") == init_stds(
        NormSpec(placement="lns"), "paper"
    )


def test_deepnorm_keeps_its_beta_xavier_init_under_every_profile() -> None:
    beta = (8 * 8) ** -0.25
    for profile in ("gpt2", "paper", "unscaled"):
        stds = init_stds(NormSpec(placement="deepnorm"), profile)
        assert stds["v"] == pytest.approx(beta * math.sqrt(2 / 256), rel=0.06)
        assert stds["q"] == pytest.approx(math.sqrt(2 / 256), rel=0.06)


def test_init_profile_is_a_config_field() -> None:
    model = small_gpt(NormSpec(placement="lns"), init="paper")
    assert model.config.init == "paper"
    with pytest.raises(ValueError):
        GPTSpec(init="xavier")


@pytest.mark.parametrize("name", ["dyt", "derf"])
def test_dyt_and_derf_alpha_comes_from_the_model_width(name: str) -> None:
    """DyT's LLaMA recipe (jiachenzhu/DyT other_tasks/LLaMA/README.md): one alpha_0 per model
    width for attention, FFN and final norms; a head-wide QK-norm or a d_ff-wide FFN norm of a
    2048-wide model gets the 2048 row (1.0 attention, 0.5 other), not its own width's."""
    spec = {"n_layers": 1, "d_model": 2048, "n_heads": 16, "max_seq_len": 8, "d_ff": 64}
    torch.manual_seed(0)
    model = build_gpt(GPTSpec(**spec), model_norm(NormSpec(type=name, qk_norm=True)), VOCAB)
    attn = model.blocks[0].attn
    assert attn.q_norm.weight.shape == (128,)
    assert attn.q_norm.alpha.item() == pytest.approx(1.0)
    assert model.blocks[0].placement.norm2.alpha.item() == pytest.approx(0.5)
    assert model.final_norm.alpha.item() == pytest.approx(0.5)
    normformer = build_gpt(
        GPTSpec(**spec), model_norm(NormSpec(type=name, placement="normformer")), VOCAB
    )
    hidden_norm = normformer.blocks[0].mlp.hidden_norm
    assert hidden_norm.weight.shape == (64,) and hidden_norm.alpha.item() == pytest.approx(0.5)


def test_derf_language_model_alpha_is_its_gpt2_patch_default() -> None:
    """zlab-princeton/Derf "language model/model_derf.patch": attn/ffn/final alpha_0 1.0 for
    GPT-2 (width 768), with the sqrt(d) embedding scale."""
    model = small_gpt(NormSpec(type="derf"), d_model=64)
    norms = [model.blocks[0].placement.norm1, model.blocks[0].placement.norm2, model.final_norm]
    assert [n.alpha.item() for n in norms] == [1.0, 1.0, 1.0]
    assert model.embed_scale.item() == pytest.approx(8.0)
