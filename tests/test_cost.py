"""What each trial cost (harness/runner/cost.py): peak memory, tokens/s, FLOPs per token, MFU
and its devices, stored with every new training trial."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from harness.env import cpu_model
from harness.runner.cost import flops_per_token, known_peak, measured_peak
from harness.runner.trial import build, prepare, run_trial
from harness.spec import load_suite
from harness.spec.plan import plan_suite
from leaderboard.cost import LABELS
from tests.factories import invoke, tiny_gpt, write_suite
from tests.test_leaderboard import run_app


def test_flops_per_token_is_palms_6n_plus_12_l_d_t_without_position_embeddings() -> None:
    model = tiny_gpt(n_layers=2, d_model=32, n_heads=4, max_seq_len=32, pos="learned")
    positions = model.embed_positions.weight.numel()
    n = sum(p.numel() for p in model.parameters()) - positions
    assert flops_per_token(model, seq_len=16, layers=2) == 6 * n + 12 * 2 * 32 * 16


def test_known_gpus_have_their_datasheet_peak_and_others_none() -> None:
    assert known_peak("NVIDIA H100 80GB HBM3", "bf16") == pytest.approx(989.4e12)
    assert known_peak("NVIDIA H200", "bf16") == pytest.approx(989.4e12)
    assert known_peak("NVIDIA H100 PCIe", "bf16") == pytest.approx(756e12)
    assert known_peak("NVIDIA A100-SXM4-80GB", "fp32") == pytest.approx(19.5e12)
    assert known_peak("NVIDIA L4", "bf16") == pytest.approx(121e12)
    assert known_peak("NVIDIA L40", "bf16") is None  # not the L4's figure
    assert known_peak("NVIDIA H100 NVL", "bf16") is None
    assert known_peak("Intel(R) Xeon(R) CPU", "fp32") is None


def test_a_cpu_peak_is_measured_once_per_host_and_kept(tmp_path: Path) -> None:
    first = measured_peak(torch.device("cpu"), "fp32", 1, tmp_path)
    assert first > 1e8  # any CPU of this century multiplies faster than 0.1 GFLOP/s
    assert measured_peak(torch.device("cpu"), "fp32", 1, tmp_path) == first
    assert len((tmp_path / "peak_flops.json").read_text().splitlines()) == 3


def test_a_cpu_peak_at_bf16_is_never_below_its_fp32_peak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a CPU without native bf16, torch.mm at bf16 runs a slow fallback (1.3 against 93
    GFLOP/s measured on an AVX2-only EPYC): a bf16 trial's MFU is taken against the fp32 peak,
    so it stays below 1; where bf16 is faster, its own peak stands."""
    from harness.runner import cost

    monkeypatch.setenv("LAYERBENCH_CACHE", str(tmp_path))
    speed = {"fp32": 93e9, "bf16": 1.3e9}
    monkeypatch.setattr(cost, "matmul_flops", lambda device, precision: speed[precision])
    peak, source = cost.peak_flops(torch.device("cpu"), "bf16", 1)
    assert peak == 93e9 and source.endswith("below its fp32 matmul: the fp32 peak")
    assert cost.peak_flops(torch.device("cpu"), "fp32", 1) == (
        93e9,
        source.split(",")[0].replace("bf16", "fp32"),
    )
    speed["bf16"] = 300e9
    monkeypatch.setenv("LAYERBENCH_CACHE", str(tmp_path / "amx"))
    assert cost.peak_flops(torch.device("cpu"), "bf16", 1)[0] == 300e9


def test_a_new_trial_stores_what_it_cost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAYERBENCH_CACHE", str(tmp_path / "cache"))
    shape = "n_layers: 2, d_model: 32, pos: learned"
    suite = load_suite(write_suite(tmp_path, "pre-ln: {}", steps=4, eval_every=4, model=shape))
    trial = plan_suite(suite)[0]
    result = run_trial(trial.config)
    assert result.status == "done", result.error
    final, env = result.final, result.environment
    assert final["tokens_per_s"] == result.tokens / result.train_time_s
    model = build(prepare(trial.config)).model
    n = sum(p.numel() for p in model.parameters()) - model.embed_positions.weight.numel()
    assert final["flops_per_token"] == 6 * n + 12 * 2 * 32 * 32  # 2 layers, d 32, seq_len 32
    assert final["mfu"] == pytest.approx(
        final["tokens_per_s"] * final["flops_per_token"] / env["peak_flops"]
    )
    assert 0 < final["mfu"] < 1
    assert 50e6 < final["peak_memory_bytes"] < 64e9  # the process's peak RSS, torch included
    assert final["devices"] == 1 and env["device_count"] == 1
    assert env["device"] == "cpu" and env["precision"] == "fp32"
    assert env["peak_flops_source"].startswith("measured: best 512x512 fp32 matmul")


@pytest.mark.slow
def test_rank_json_and_the_leaderboard_show_what_each_trial_cost(tmp_path: Path) -> None:
    suite = write_suite(tmp_path, "pre-ln: {}", steps=2, eval_every=2)
    assert invoke("run", str(suite), "--no-mlflow").exit_code == 0
    ranked = json.loads(invoke("rank", str(suite), "--format", "json").stdout)
    trials = [trial for row in ranked["rows"] for trial in row["trials"]]
    assert len(trials) == 2
    for trial in trials:
        cost = trial["cost"]
        assert cost["tokens_per_s"] > 0 and 0 < cost["mfu"] < 1 and cost["devices"] == 1
        assert cost["peak_memory_bytes"] > 50e6 and cost["flops_per_token"] > 0
        assert cost["device_name"] == cpu_model()
    at = run_app("trial", key=trials[0]["key"])
    table = at.dataframe[-1].value
    assert list(table["cost"]) == list(LABELS.values())
    shown_cost = dict(zip(table["cost"], table["value"], strict=True))
    assert shown_cost["device"] == cpu_model() and shown_cost["MFU"].endswith("%")
    compare = run_app("compare")
    assert "What it cost" in [header.value for header in compare.header]
    per_method = compare.dataframe[-1].value
    assert list(per_method["method"]) == ["pre-ln"] and per_method["devices"][0] == "1"
