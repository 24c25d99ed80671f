"""Layer pruning (SPEC 5.5): each criterion picks what its paper's formula picks, computed here
independently, and a pruned model runs and equals a model built without those layers."""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from harness.methods.layers import ZeroBranch, blocks, layers_removed, remove_layers, sublayer
from harness.methods.pruning import PruneContext, gate_norm, layers_to_remove, prune_model
from harness.models.gpt import GPTSpec, build_gpt
from harness.models.gpt_hf import as_pretrained
from harness.registry import PRUNING
from harness.spec.recipe import model_norm
from harness.spec.sections import NormSpec, PruneSpec
from tests.factories import tiny_gpt

VOCAB, LAYERS, D_MODEL = 48, 5, 32


def llama(layers: int = LAYERS) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=D_MODEL,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config).eval()


def gpt(layers: int = LAYERS, placement: str = "pre") -> nn.Module:
    spec = {"n_layers": layers, "d_model": D_MODEL, "n_kv_heads": 2, "max_seq_len": 64}
    return tiny_gpt(NormSpec(placement=placement), VOCAB, **spec).eval()


MODELS: dict[str, Callable[..., nn.Module]] = {"llama": llama, "gpt": gpt}


@pytest.fixture(scope="module")
def calibration() -> list[Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(0, VOCAB, (3, 16), generator=generator) for _ in range(2)]


def context(
    calibration: list[Tensor], evaluate: Callable[[nn.Module], float] | None = None
) -> PruneContext:
    return PruneContext(calibration, evaluate, seed=7)


def block_streams(model: nn.Module, batch: Tensor) -> list[Tensor]:
    """Residual stream before each block and after the last, from output_hidden_states."""
    probe = copy.deepcopy(model)
    if isinstance(probe, LlamaForCausalLM):
        probe.model.norm = nn.Identity()  # Llama's last hidden state is after its final norm
    with torch.no_grad():
        hidden = probe(input_ids=batch, output_hidden_states=True).hidden_states
    return [h.flatten(0, 1).double() for h in hidden]


def attention_outputs(model: nn.Module, batch: Tensor) -> list[Tensor]:
    """What each attention sublayer adds to the residual stream."""
    outputs: list[Tensor] = []
    handles = [
        sublayer(model, i, "attention").register_forward_hook(
            lambda m, a, out: outputs.append(out[0] if isinstance(out, tuple) else out)
        )
        for i in range(len(blocks(model)))
    ]
    with torch.no_grad():
        model(input_ids=batch)
    for handle in handles:
        handle.remove()
    return [out.flatten(0, 1).double() for out in outputs]


def mean_cos(x: Tensor, y: Tensor) -> float:
    return float((x * y).sum(-1).div(x.norm(dim=-1) * y.norm(dim=-1)).mean())


def k_smallest(values: list[float], k: int) -> list[int]:
    return sorted(sorted(range(len(values)), key=values.__getitem__)[:k])


def rename_layers(state: dict[str, Tensor], kept: list[int]) -> dict[str, Tensor]:
    """The state dict of the kept blocks, renumbered 0..len(kept)-1; other blocks dropped."""
    new_index = {old: new for new, old in enumerate(kept)}
    renamed = {}
    for key, value in state.items():
        match = re.match(r"(.*(?:layers|blocks))\.(\d+)\.(.*)", key)
        if match is None:
            renamed[key] = value
        elif int(match[2]) in new_index:
            renamed[f"{match[1]}.{new_index[int(match[2])]}.{match[3]}"] = value
    return renamed


def zero_branch_reference(model: nn.Module, removed: list[int], target: str) -> nn.Module:
    """An independent model whose removed sublayers write zero: output projection weights zeroed."""
    reference = copy.deepcopy(model)
    for i in removed:
        module = sublayer(reference, i, target)
        projection = module.o_proj if target == "attention" else module.down_proj
        nn.init.zeros_(projection.weight)
    return reference


@pytest.mark.parametrize("kind", ["llama", "gpt"])
def test_block_influence_removes_blocks_least_changing_their_input(
    kind: str, calibration: list[Tensor]
) -> None:
    model = MODELS[kind]()
    streams = [block_streams(model, batch) for batch in calibration]
    cosines = [
        mean_cos(torch.cat([s[i] for s in streams]), torch.cat([s[i + 1] for s in streams]))
        for i in range(LAYERS)
    ]
    spec = PruneSpec(criterion="block_influence", n=2)
    pruned, report = prune_model(model, spec, context(calibration))
    influence = [1 - cosine for cosine in cosines]
    assert report.removed == k_smallest(influence, 2)
    assert [report.scores[i] for i in range(LAYERS)] == pytest.approx(influence, abs=1e-6)
    assert (report.layers_before, report.layers_after) == (LAYERS, LAYERS - 2)
    assert pruned.config.num_hidden_layers == LAYERS - 2 == len(blocks(pruned))


@pytest.mark.parametrize("kind", ["llama", "gpt"])
@pytest.mark.parametrize("target", ["attention", "mlp"])
def test_block_influence_of_sublayers_uses_the_stream_around_them(
    kind: str, target: str, calibration: list[Tensor]
) -> None:
    model = MODELS[kind]()
    before, added = [], []
    for batch in calibration:
        streams, attention = block_streams(model, batch), attention_outputs(model, batch)
        middle = [s + a for s, a in zip(streams, attention, strict=False)]
        before.append(streams[:-1] if target == "attention" else middle)
        added.append(middle if target == "attention" else streams[1:])
    scores = [
        1 - mean_cos(torch.cat([b[i] for b in before]), torch.cat([a[i] for a in added]))
        for i in range(LAYERS)
    ]
    spec = PruneSpec(criterion="block_influence", n=2, target=target)
    _, report = prune_model(model, spec, context(calibration))
    assert report.removed == k_smallest(scores, 2)
    assert [report.scores[i] for i in range(LAYERS)] == pytest.approx(scores, abs=1e-6)


def test_sublayer_scores_refuse_post_norm_blocks(calibration: list[Tensor]) -> None:
    spec = PruneSpec(criterion="block_influence", n=1, target="attention")
    with pytest.raises(ValueError, match="pre-norm"):
        prune_model(gpt(placement="post"), spec, context(calibration))


def procrustes_linearity(x: Tensor, y: Tensor) -> float:
    """The paper's score as its official code computes it: 1 - ||X~ A - Y~||^2 after centering
    and Frobenius normalization, A the least-squares solution."""
    x, y = x - x.mean(0), y - y.mean(0)
    x, y = x / x.norm(), y / y.norm()
    solution = torch.linalg.lstsq(x, y).solution
    return float(1 - (x @ solution - y).square().sum())


@pytest.mark.parametrize("kind", ["llama", "gpt"])
def test_linearity_removes_the_most_linear_blocks(kind: str, calibration: list[Tensor]) -> None:
    model = MODELS[kind]()
    streams = [block_streams(model, batch) for batch in calibration]
    scores = [
        procrustes_linearity(
            torch.cat([s[i] for s in streams]), torch.cat([s[i + 1] for s in streams])
        )
        for i in range(LAYERS)
    ]
    _, report = prune_model(model, PruneSpec(criterion="linearity", n=2), context(calibration))
    assert report.removed == k_smallest([-s for s in scores], 2)
    assert [report.scores[i] for i in range(LAYERS)] == pytest.approx(scores, rel=1e-6)


@pytest.mark.parametrize("kind", ["llama", "gpt"])
def test_attention_qk_removes_the_weakest_query_key_gates(kind: str) -> None:
    model = MODELS[kind]()
    norms = []
    for i in range(LAYERS):
        attention = sublayer(model, i, "attention")
        d = attention.head_dim
        w_q, w_k = attention.q_proj.weight.detach(), attention.k_proj.weight.detach()
        n_q, n_kv = w_q.shape[0] // d, w_k.shape[0] // d
        gates = [
            w_q[h * d : (h + 1) * d].T
            @ w_k[(h // (n_q // n_kv)) * d : (h // (n_q // n_kv) + 1) * d]
            for h in range(n_q)
        ]
        norms.append(math.sqrt(sum(float(gate.norm()) ** 2 for gate in gates)))
    spec = PruneSpec(criterion="attention_qk", n=2, target="attention")
    pruned, report = prune_model(model, spec, context([]))
    assert report.removed == k_smallest(norms, 2)
    assert [report.scores[i] for i in range(LAYERS)] == pytest.approx(norms, rel=1e-5)
    assert all(
        isinstance(sublayer(pruned, i, "attention"), ZeroBranch) == (i in report.removed)
        for i in range(LAYERS)
    )
    with pytest.raises(ValueError, match="supports target attention"):
        prune_model(MODELS[kind](), PruneSpec(criterion="attention_qk", n=1), context([]))


def test_attention_qk_scores_heads_separately_so_they_cannot_cancel() -> None:
    """Two heads with opposite query-key forms (W_K^2 = -W_K^1, W_Q^2 = W_Q^1) both attend; the
    Frobenius norm of their summed form is 0, the per-head score sqrt(2) ||W_Q^1 (W_K^1)^T||."""
    torch.manual_seed(0)
    spec = GPTSpec(n_layers=1, d_model=16, n_heads=2, max_seq_len=16)
    attention = build_gpt(spec, model_norm(NormSpec()), VOCAB).blocks[0].attn
    with torch.no_grad():
        attention.q_proj.weight[8:] = attention.q_proj.weight[:8]
        attention.k_proj.weight[8:] = -attention.k_proj.weight[:8]
    w_q, w_k = attention.q_proj.weight.detach(), attention.k_proj.weight.detach()
    assert float((w_q.T @ w_k).norm()) < 1e-6  # the old, summed score
    one_head = float((w_q[:8].T @ w_k[:8]).norm())
    assert gate_norm(attention) == pytest.approx(math.sqrt(2) * one_head, rel=1e-6)


def test_attention_qk_refuses_qk_norm_models() -> None:
    torch.manual_seed(0)
    spec = GPTSpec(n_layers=2, d_model=16, n_heads=2, max_seq_len=16)
    model = build_gpt(spec, model_norm(NormSpec(qk_norm=True)), VOCAB)
    with pytest.raises(ValueError, match="QK-norm"):
        prune_model(
            model, PruneSpec(criterion="attention_qk", n=1, target="attention"), context([])
        )


@pytest.mark.parametrize("target", ["block", "attention"])
def test_task_greedy_removes_greedily_what_lowers_the_loss(target: str) -> None:
    model = llama()
    original = list(blocks(model))

    def removed_now(candidate: nn.Module) -> frozenset[int]:
        if target == "block":
            return frozenset(i for i, b in enumerate(original) if b not in list(blocks(candidate)))
        return frozenset(
            i for i in range(LAYERS) if isinstance(sublayer(candidate, i, "attention"), ZeroBranch)
        )

    cost = [0.5, 0.3, 0.6, 0.1, 0.4]

    def loss(candidate: nn.Module) -> float:  # {0, 2} is best, but greedy starts from 3
        removed = removed_now(candidate)
        return sum(cost[i] for i in removed) - (5.0 if removed == {0, 2} else 0.0)

    spec = PruneSpec(criterion="task_greedy", n=2, target=target)
    pruned, report = prune_model(model, spec, context([], loss))
    assert report.removed == [1, 3]
    assert report.scores[3] == pytest.approx(0.1) and report.scores[1] == pytest.approx(0.4)
    assert removed_now(pruned) == {1, 3}
    with pytest.raises(ValueError, match="validation loss"):
        prune_model(llama(), spec, context([]))


def test_position_and_random_baselines(calibration: list[Tensor]) -> None:
    def removed(criterion: str, seed: int = 7) -> list[int]:
        spec = PruneSpec(criterion=criterion, n=2)
        return prune_model(gpt(), spec, PruneContext(calibration, None, seed))[1].removed

    assert removed("first_n") == [0, 1]
    assert removed("last_n") == [3, 4]
    draws = torch.rand(LAYERS, generator=torch.Generator().manual_seed(3)).tolist()
    assert removed("random", seed=3) == k_smallest(draws, 2)


def test_amount_is_n_or_rounded_fraction() -> None:
    assert layers_to_remove(PruneSpec(criterion="last_n", fraction=0.5), 5) == 3
    assert layers_to_remove(PruneSpec(criterion="last_n", fraction=0.25), 6) == 2
    assert layers_to_remove(PruneSpec(criterion="last_n", n=2), 6) == 2
    with pytest.raises(ValueError, match="between 1 and 4"):
        layers_to_remove(PruneSpec(criterion="last_n", n=5), 5)
    with pytest.raises(ValueError, match="between 1 and 9"):
        layers_to_remove(PruneSpec(criterion="last_n", fraction=0.01), 10)


def test_every_criterion_cites_its_source() -> None:
    assert {"block_influence", "linearity", "attention_qk", "task_greedy"} <= set(PRUNING.names())
    assert {"last_n", "first_n", "random"} <= set(PRUNING.names())
    assert all(entry.doc for entry in PRUNING.entries())


def generate(model: nn.Module, prompt: Tensor, use_cache: bool) -> Tensor:
    return as_pretrained(model).generate(
        prompt, max_new_tokens=6, do_sample=False, use_cache=use_cache
    )


def assert_same_outputs(model: nn.Module, reference: nn.Module, batch: Tensor, cache: bool) -> None:
    """Equal logits, and equal greedy generations (with the KV cache when the model has one)."""
    with torch.no_grad():
        assert torch.equal(model(input_ids=batch).logits, reference(input_ids=batch).logits)
    prompt = batch[:1, :5]
    tokens = generate(model, prompt, cache)
    assert torch.equal(tokens, generate(reference, prompt, cache))
    assert torch.equal(tokens, generate(model, prompt, use_cache=False))


@pytest.mark.parametrize("kind", ["llama", "gpt"])
def test_removed_blocks_equal_a_model_built_without_them(
    kind: str, calibration: list[Tensor]
) -> None:
    model = MODELS[kind]()
    kept = [1, 2, 4]
    fresh = MODELS[kind](layers=len(kept))
    fresh.load_state_dict(rename_layers(model.state_dict(), kept))
    remove_layers(model, [0, 3], "block")
    assert model.config.num_hidden_layers == len(kept) == len(blocks(model))
    assert_same_outputs(model, fresh, calibration[0], cache=kind == "llama")
    if kind == "llama":
        assert [block.self_attn.layer_idx for block in blocks(model)] == [0, 1, 2]


@pytest.mark.parametrize("kind", ["llama", "gpt"])
@pytest.mark.parametrize("target", ["attention", "mlp"])
def test_removed_sublayers_equal_zeroed_residual_branches(
    kind: str, target: str, calibration: list[Tensor]
) -> None:
    model = MODELS[kind]()
    reference = zero_branch_reference(model, [0, 3], target)
    remove_layers(model, [0, 3], target)
    assert len(blocks(model)) == LAYERS
    assert_same_outputs(model, reference, calibration[0], cache=kind == "llama")
    if kind == "llama" and target == "attention":
        attentions = [sublayer(model, i, "attention") for i in (1, 2, 4)]
        assert [attention.layer_idx for attention in attentions] == [0, 1, 2]


def test_layers_removed_restores_the_model(calibration: list[Tensor]) -> None:
    model = llama()
    with torch.no_grad():
        before = model(input_ids=calibration[0]).logits
        for target in ("block", "attention", "mlp"):
            with layers_removed(model, [0, 2], target) as pruned:
                assert not torch.equal(pruned(input_ids=calibration[0]).logits, before)
        assert torch.equal(model(input_ids=calibration[0]).logits, before)
    assert model.config.num_hidden_layers == LAYERS == len(blocks(model))
    assert [block.self_attn.layer_idx for block in blocks(model)] == list(range(LAYERS))
    assert not any(isinstance(module, ZeroBranch) for module in model.modules())


def test_layer_types_follow_and_mixed_caches_refuse_attention_removal() -> None:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=D_MODEL,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        layer_types=["full_attention", "sliding_attention"] * 2,
        use_sliding_window=True,
        sliding_window=4,
    )
    model = Qwen2ForCausalLM(config).eval()
    with pytest.raises(NotImplementedError, match="mixed layer_types"):
        remove_layers(model, [0], "attention")
    remove_layers(model, [0], "block")
    assert model.config.layer_types == ["sliding_attention", "full_attention", "sliding_attention"]
    prompt = torch.randint(0, VOCAB, (1, 6))
    assert torch.equal(generate(model, prompt, True), generate(model, prompt, False))
