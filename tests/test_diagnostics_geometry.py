"""The seed's geometric layer diagnostics against closed forms, and pretrained-model diagnostics
(attention sinks) on a tiny Llama built here."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from harness.diagnostics_geometry import (
    WeightTracker,
    effective_rank,
    spectral_norm,
    tokenwise_share,
)
from harness.diagnostics_pretrained import attention_sink_stats, pretrained_layer_stats


def test_effective_rank_of_equal_singular_values_is_their_count() -> None:
    generator = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(64, 64, generator=generator, dtype=torch.float64))
    rank_5 = q[:, :5] @ (3.0 * torch.eye(5, dtype=torch.float64)) @ q[:, 5:10].T
    assert effective_rank(rank_5) == pytest.approx(5.0, abs=1e-9)


def test_effective_rank_of_an_isotropic_gaussian_is_near_full() -> None:
    gaussian = torch.randn(20_000, 32, generator=torch.Generator().manual_seed(0))
    assert 31.5 < effective_rank(gaussian) <= 32.0


def test_tokenwise_share_is_one_for_a_diagonal_map_and_low_for_a_mixing_one() -> None:
    x = torch.randn(256, 8, generator=torch.Generator().manual_seed(0))
    scale = torch.linspace(0.5, 2.0, 8)
    assert tokenwise_share(x, x * scale) == pytest.approx(1.0, abs=1e-9)
    shuffled = x[torch.randperm(256, generator=torch.Generator().manual_seed(1))]
    assert tokenwise_share(x, x + shuffled) < 0.5  # an update from other tokens


def test_spectral_norm_of_a_known_matrix() -> None:
    matrix = torch.diag(torch.tensor([5.0, 3.0, 1.0])) @ torch.linalg.qr(torch.randn(3, 3))[0]
    value, vector = spectral_norm(matrix, torch.ones(3))
    assert value == pytest.approx(5.0, rel=1e-4)
    warm, _ = spectral_norm(matrix, vector)  # warm start: already converged
    assert warm == pytest.approx(5.0, rel=1e-5)


def test_rotation_is_zero_at_step_zero_and_grows_with_training() -> None:
    layers = nn.ModuleList([nn.Linear(6, 6), nn.Linear(6, 6)])
    tracker = WeightTracker(list(layers))
    at_start = {(s.layer, s.name): s.value for s in tracker.stats(0)}
    assert at_start[0, "layer_rotation"] == pytest.approx(0.0, abs=1e-12)
    assert at_start[1, "spectral_norm/weight"] == pytest.approx(
        float(torch.linalg.matrix_norm(layers[1].weight.detach(), 2)), rel=1e-3
    )
    with torch.no_grad():
        layers[0].weight.neg_()
        layers[0].bias.neg_()
    rotated = {(s.layer, s.name): s.value for s in tracker.stats(1)}
    assert rotated[0, "layer_rotation"] == pytest.approx(2.0)  # opposite weights
    assert rotated[1, "layer_rotation"] == pytest.approx(0.0, abs=1e-12)


def test_rotation_measures_weight_matrices_only() -> None:
    """Carbonnelle & De Vleeschouwer's rotation is of kernels: a bias that moves alone does not
    rotate the layer."""
    layer = nn.Linear(6, 6)
    tracker = WeightTracker([layer])
    with torch.no_grad():
        layer.bias.add_(10.0)
    (rotation,) = [s.value for s in tracker.stats(1) if s.name == "layer_rotation"]
    assert rotation == pytest.approx(0.0, abs=1e-12)


def test_a_resumed_tracker_follows_its_weights_onto_their_device() -> None:
    """A checkpoint is read onto the CPU; the tracker's reference weights and power-iteration
    vectors go back to the device of the weights they belong to."""
    saved = WeightTracker([nn.Linear(4, 4)]).state_dict()
    on_meta = nn.Linear(4, 4, device="meta")
    tracker = WeightTracker([on_meta])
    tracker.load_state_dict(saved)
    assert {t.device.type for t in tracker.initial[0]} == {"meta"}
    assert {v.device.type for v in tracker.vectors.values()} == {"meta"}


def test_degenerate_blocks_have_no_rank_and_no_share() -> None:
    """An all-zero output has effective rank 0; a block that leaves its input unchanged has
    no update to share out (NaN, stored as NULL)."""
    assert effective_rank(torch.zeros(8, 4)) == 0.0
    x = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
    assert math.isnan(tokenwise_share(x, x))


def test_attention_sink_mass_is_the_weight_on_the_first_token() -> None:
    weights = torch.zeros(1, 2, 4, 4)
    weights[:, 0, :, 0] = 1.0  # head 0 attends only to the first token
    weights[:, 1] = torch.eye(4)  # head 1 to itself
    stats = {(s.layer, s.name): s.value for s in attention_sink_stats([weights], 0)}
    assert stats[0, "attention_sink/head_0"] == 1.0
    assert stats[0, "attention_sink/head_1"] == 0.0
    assert stats[0, "attention_sink"] == 0.5
    assert stats[0, "attention_sink_max"] == 1.0


def test_pretrained_llama_records_every_layer_statistic() -> None:
    from tests.factories import tiny_llama

    torch.manual_seed(0)
    model = tiny_llama(64, n_layers=3)
    implementation = model.config._attn_implementation
    stats = pretrained_layer_stats(model, torch.randint(0, 64, (2, 12)))
    names = {s.name for s in stats}
    for name in ("hidden_rms", "max_abs_activation", "block_influence", "attention_sink"):
        assert {s.layer for s in stats if s.name == name} == {0, 1, 2}
    assert {"peak_activation", "peak_position", "peak_channel", "effective_rank"} <= names
    assert {"attention_sink/head_0", "attention_sink/head_1", "tokenwise_share"} <= names
    for name in ("feature_norm", "negative_aware_norm"):
        assert {s.layer for s in stats if s.name == name} == {0, 1, 2}
    assert model.config._attn_implementation == implementation  # restored
    sinks = [s.value for s in stats if s.name == "attention_sink"]
    assert all(0.0 < value < 1.0 and math.isfinite(value) for value in sinks)


def test_the_last_block_output_is_taken_before_the_final_norm() -> None:
    from harness.diagnostics_pretrained import forward_with_attention
    from harness.methods.layers import blocks
    from tests.factories import tiny_llama

    model = tiny_llama(64, n_layers=2)
    seen: list[torch.Tensor] = []
    blocks(model)[-1].register_forward_hook(lambda m, a, out: seen.append(out))
    hidden, attentions = forward_with_attention(model, torch.randint(0, 64, (1, 8)))
    last = seen[0][0] if isinstance(seen[0], tuple) else seen[0]
    assert len(hidden) == 3 and len(attentions) == 2
    assert torch.equal(hidden[-1], last.float())


@pytest.mark.slow
def test_smollm2_has_massive_activations_on_the_first_token_and_attention_sinks() -> None:
    """The packaged SmolLM2-135M (offline) on its probe batch: the seed's phenomena appear."""
    from harness.diagnostics_pretrained import probe_batch
    from harness.registry import MODELS, TASKS
    from harness.spec.recipe import parsed_section
    from harness.tasks.corpora import ModelTokenizer

    entry, params = parsed_section(MODELS, {"type": "pretrained", "source": "smollm2-135m"})
    missing = entry.missing(params) if entry.missing else None
    if missing:
        pytest.skip(f"SmolLM2 is not installed here (`{missing}`)")
    loaded = entry.obj(params)
    task_spec = {"type": "perplexity", "corpus": "shakespeare", "split": "test", "seq_len": 128}
    task_entry, task_params = parsed_section(TASKS, task_spec)
    task = task_entry.obj(task_params, ModelTokenizer(loaded.tokenizer))
    stats = pretrained_layer_stats(loaded.model, probe_batch(task, torch.device("cpu")))
    by_name = {(s.name, s.layer): s.value for s in stats}
    for name in ("hidden_rms", "max_abs_activation", "block_influence", "attention_sink"):
        assert all((name, layer) in by_name for layer in range(30)), name
    peak = {s.name: s.value for s in stats if s.name.startswith("peak_")}
    assert peak["peak_position"] == 0.0 and peak["peak_activation"] > 1000  # massive, first token
    assert max(by_name["attention_sink", layer] for layer in range(30)) > 0.3


def test_the_negative_aware_norm_divides_the_l1_norm_by_the_active_units() -> None:
    """Park et al. 2023, Eq. 9-10: ||a||_1 / ||a||_0, ||a||_0 = d - |{i: a_i <= 0}|."""
    from harness.diagnostics_geometry import feature_norm_stats, negative_aware_norm

    a = torch.tensor([[3.0, -1.0, 0.0, 2.0], [0.5, 0.5, 0.5, 0.5]])
    assert negative_aware_norm(a[:1]) == pytest.approx(6.0 / 2)
    assert negative_aware_norm(a) == pytest.approx((3.0 + 0.5) / 2)
    relu = torch.relu(torch.randn(64, 32, generator=torch.Generator().manual_seed(0)))
    mean_active = (relu.sum(-1) / (relu > 0).sum(-1)).mean()  # the mean active unit
    assert negative_aware_norm(relu) == pytest.approx(float(mean_active))
    stats = {(s.layer, s.name): s.value for s in feature_norm_stats({1: a}, 0)}
    assert stats == {(1, "feature_norm"): pytest.approx(4.0), (1, "negative_aware_norm"): 1.75}


def test_feature_norms_are_those_of_each_blocks_mlp_hidden_features() -> None:
    from harness.diagnostics import hidden_state_stats
    from harness.methods.layers import blocks
    from tests.factories import tiny_gpt

    model = tiny_gpt().eval()
    seen: dict[int, torch.Tensor] = {}
    for index, block in enumerate(blocks(model)):
        block.mlp.down_proj.register_forward_pre_hook(
            lambda m, args, index=index: seen.__setitem__(index, args[0].flatten(0, -2))
        )
    ids = torch.randint(0, 37, (2, 8), generator=torch.Generator().manual_seed(0))
    stats = {(s.layer, s.name): s.value for s in hidden_state_stats(model, ids, 0)}
    for index, a in seen.items():
        assert stats[index, "feature_norm"] == pytest.approx(float(a.abs().sum(-1).mean()))
        active = (a > 0).sum(-1).clamp(min=1)
        nan = float((a.abs().sum(-1) / active).mean())
        assert stats[index, "negative_aware_norm"] == pytest.approx(nan)
    assert len(seen) == 2
    # only the test's own hook is left: the diagnostics removed theirs
    assert all(len(b.mlp.down_proj._forward_pre_hooks) == 1 for b in blocks(model))
