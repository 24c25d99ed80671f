"""Removing a pretrained model's norms by fine-tuning (`remove_norms`, Heimersheim 2024): the
frozen scale, the authors' schedule, and a fine-tuning trial that ends without norms.

The model is a tiny Llama built in the test (RMSNorm, as SmolLM2)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from harness.methods.catalog import RemoveNormsParams
from harness.methods.norm_removal import (
    FrozenScaleNorm,
    llama_norms,
    model_norms,
    removal_schedule,
)
from harness.methods.optimizers import make_optimizer
from harness.spec.sections import OptimizerSpec
from tests.factories import tiny_gpt, tiny_llama

N_LAYERS = 3


def ids(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 300, (2, 16), generator=torch.Generator().manual_seed(seed))


def test_wrapped_norms_change_nothing_until_removed_and_then_divide_by_the_frozen_scale() -> None:
    model = tiny_llama(300, N_LAYERS)
    with torch.no_grad():
        before = model(input_ids=ids()).logits
        first, second, final = llama_norms(model)
        assert torch.equal(model(input_ids=ids()).logits, before)  # calibrates, changes nothing
    assert all(torch.isfinite(norm.scale) for norm in [*first, *second, final])
    hidden = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(1)) * 3
    norm = FrozenScaleNorm(model.model.layers[0].post_attention_layernorm.norm)
    norm(hidden)  # the first input calibrates: RMS of every element past position 0
    assert float(norm.scale) == pytest.approx(float(hidden[:, 1:].pow(2).mean().sqrt()))
    norm.removed = True
    x = torch.randn(2, 5, 32)
    assert torch.allclose(norm(x), x / norm.scale * norm.norm.weight)
    layer = nn.LayerNorm(32)  # a LayerNorm keeps centring: (x - mean) / s * w + b
    centred = FrozenScaleNorm(layer)
    centred(hidden)
    assert float(centred.scale) == pytest.approx(float(hidden[:, 1:].std()))
    centred.removed = True
    expected = (x - x.mean(-1, keepdim=True)) / centred.scale * layer.weight + layer.bias
    assert torch.allclose(centred(x), expected)


def test_the_value_path_loses_its_norm_apart_from_the_query_and_key_path() -> None:
    model = tiny_llama(300, N_LAYERS)
    first, _, _ = llama_norms(model)
    attention = model.model.layers[0].self_attn
    seen: dict[str, torch.Tensor] = {}
    attention.q_proj.register_forward_hook(lambda m, i, o: seen.__setitem__("q", i[0]))
    attention.v_proj.v_proj.register_forward_hook(lambda m, i, o: seen.__setitem__("v", i[0]))
    norm = first[0]
    with torch.no_grad():
        model(input_ids=ids())
        assert torch.equal(seen["q"], seen["v"])
        norm.removed = True  # queries and keys see the frozen scale, values the real norm
        model(input_ids=ids())
        assert not torch.allclose(seen["q"], seen["v"])
        norm.value_removed = True
        model(input_ids=ids())
        assert torch.equal(seen["q"], seen["v"])


def test_the_schedule_is_the_authors_block_by_block_order() -> None:
    """ln_2 of block i at start + i gap_mlp, then ln_1 for queries and keys, then for values,
    then the final norm (config.py `make_gpt2_standard`: 20, 2, 2, 3 for 12 blocks)."""
    model = tiny_llama(300, N_LAYERS)
    first, second, final = llama_norms(model)
    schedule = removal_schedule(first, second, final, RemoveNormsParams())
    assert sorted(schedule) == [20, 22, 24, 26, 28, 30, 32, 35, 38, 41]
    for step in sorted(schedule):
        for removal in schedule[step]:
            removal()
        done = [n.removed for n in second], [n.removed for n in first]
        values = [n.value_removed for n in first]
        if step == 24:
            assert done == ([True] * 3, [False] * 3)
        if step == 30:
            assert done == ([True] * 3, [True] * 3) and values == [False] * 3
        if step == 38:
            assert values == [True] * 3 and not final.removed
    assert final.removed
    twelve = removal_schedule(*llama_norms(tiny_llama(300, 12)), RemoveNormsParams())
    assert max(twelve) == 20 + 12 * 2 + 12 * 2 + 12 * 3  # start_lnf of make_gpt2_standard


def test_fine_tuning_removes_every_norm_on_the_schedule() -> None:
    model = tiny_llama(300, N_LAYERS).train()
    spec = OptimizerSpec.model_validate(
        {
            "name": "adamw",
            "lr": 1e-3,
            "layerwise": {
                "name": "remove_norms",
                "start": 1,
                "gap_mlp": 1,
                "gap_qk": 0,
                "gap_v": 1,
            },
        }
    )
    optimizer = make_optimizer(model, spec)
    norms = [m for m in model.modules() if isinstance(m, FrozenScaleNorm)]
    assert len(norms) == 2 * N_LAYERS + 1 and not any(n.removed for n in norms)
    for step in range(8):
        model(input_ids=ids(step), labels=ids(step)).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step == 0:  # global step 1: the first block's second norm
            assert [n.removed for n in norms].count(True) == 1
    assert all(n.removed for n in norms)
    assert all(n.value_removed for n in norms if n.value_path)
    with pytest.raises(
        ValueError, match="remove_norms: Sequential is neither a transformers Llama"
    ):
        llama_norms(nn.Sequential(nn.Linear(2, 2)))


def test_a_fine_tuning_trial_removes_the_norms(tmp_path: Path) -> None:
    from tests.test_finetune import TEXT, byte_bpe_tokenizer, finetune_suite, run_methods

    model = tmp_path / "tiny"
    tokenizer = byte_bpe_tokenizer([TEXT] * 20, 300)
    tiny_llama(len(tokenizer), N_LAYERS).save_pretrained(model)
    tokenizer.save_pretrained(model)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for index in range(20):
        (corpus / f"doc{index:02d}.txt").write_text(f"{index}. {TEXT}\n" * 8)
    suite = finetune_suite(tmp_path, model, corpus=f"file:{corpus}")
    # second norms at global step 0, first norms 0-2 (queries, keys), 3 (values), final 3
    layerwise = "{name: remove_norms, start: 0, gap_mlp: 0, gap_qk: 1, gap_v: 0}"
    (result,) = run_methods(suite, f"  full: {{optimizer: {{layerwise: {layerwise}}}}}\n").values()
    assert result.steps_done == 6 and result.status == "done"
    assert result.final["before_val_loss"] > result.final["val_loss"]  # a random model learns


def test_a_pre_ln_gpt_with_layernorm_loses_its_norms_as_gpt_2_does() -> None:
    """GPT-2's setting: Pre-LN LayerNorms (centring kept) before attention, MLP and the head."""
    from harness.spec.sections import NormSpec

    model = tiny_gpt(NormSpec(placement="pre", type="layernorm")).eval()
    tokens = torch.randint(0, 37, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(input_ids=tokens).logits
        first, second, final = model_norms(model)
        assert torch.equal(model(input_ids=tokens).logits, before)
        assert final is not None and all(n.centred for n in [*first, *second, final])
        for norm in [*first, *second, final]:
            norm.removed = norm.value_removed = True
        removed = model(input_ids=tokens).logits
    assert torch.isfinite(removed).all() and not torch.allclose(removed, before)
    with pytest.raises(ValueError, match="a gpt must place its norms as GPT-2 does"):
        model_norms(tiny_gpt(NormSpec(placement="post")))


def test_a_resumed_schedule_has_the_norms_removed_that_it_had_removed() -> None:
    from harness.methods.norm_removal import NormRemover

    params = RemoveNormsParams(start=1, gap_mlp=1, gap_qk=1, gap_v=1)
    model = tiny_llama(300, N_LAYERS)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    norms = model_norms(model)
    remover = NormRemover(optimizer, removal_schedule(*norms, params))
    for _ in range(6):
        optimizer.step()
    state = remover.state_dict()
    fresh = tiny_llama(300, N_LAYERS)  # a resumed trial builds its model and wrapper again
    again = model_norms(fresh)
    schedule = removal_schedule(*again, params)
    restored = NormRemover(torch.optim.SGD(fresh.parameters(), lr=0.0), schedule)
    restored.load_state_dict(state)
    flags = [[(n.removed, n.value_removed) for n in group] for group in norms[:2]]
    assert flags == [[(n.removed, n.value_removed) for n in group] for group in again[:2]]
    assert restored.step == 6 and sum(n.removed for n in norms[1]) == N_LAYERS
    # mid-schedule (step 6): the query/key paths' norms gone (steps 4-6), the values' not yet
    assert all(n.removed and not n.value_removed for n in norms[0])
