"""GPU placement of the local runner's trials, tested with fake GPU counts (no GPU here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.runner.placement import (
    GPU_VARIABLE,
    GpuPool,
    Placement,
    PlacementError,
    gpus_needed,
    visible_gpus,
)


def test_the_gpus_counted_are_the_drivers_unless_cuda_visible_devices_says(tmp_path: Path) -> None:
    for index in range(3):
        (tmp_path / f"0000:0{index}:00.0").mkdir()
    assert visible_gpus({}, tmp_path) == ("0", "1", "2")
    assert visible_gpus({GPU_VARIABLE: "2, 5"}, tmp_path) == ("2", "5")
    assert visible_gpus({GPU_VARIABLE: ""}, tmp_path) == ()
    assert visible_gpus({GPU_VARIABLE: "-1"}, tmp_path) == ()
    assert visible_gpus({}, tmp_path / "absent") == ()


def test_a_trial_needs_one_gpu_when_cuda_unless_the_suite_says() -> None:
    assert gpus_needed("cuda", None, 8) == 1 and gpus_needed("auto", None, 8) == 1
    assert gpus_needed("auto", None, 0) == 0 and gpus_needed("cpu", None, 8) == 0
    assert gpus_needed("cuda", 2, 8) == 2 and gpus_needed("cuda", 1.5, 8) == 2
    assert gpus_needed("cuda", 0.5, 8) == 0.5


def test_eight_workers_on_four_gpus_run_four_trials_each_on_its_own_gpu() -> None:
    placement = Placement(GpuPool.of_count(4))
    placed = [placement.take("cuda") for _ in range(8)]
    assert placed[:4] == [("0",), ("1",), ("2",), ("3",)]
    assert placed[4:] == [None] * 4  # the other trials wait
    assert placement.environment(("2",)) == {GPU_VARIABLE: "2"}
    placement.give_back("cuda", ("2",))
    assert placement.take("cuda") == ("2",)


def test_a_trial_needing_k_gpus_waits_for_k_idle_ones() -> None:
    placement = Placement(GpuPool.of_count(4), gpus=2)
    first = placement.take("cuda")
    assert first == ("0", "1") and placement.take("cuda") == ("2", "3")
    assert not placement.ready("cuda")
    placement.give_back("cuda", first)
    assert placement.ready("cuda") and placement.environment(first) == {GPU_VARIABLE: "0,1"}


def test_only_fractions_share_a_gpu_and_they_pack_onto_the_fullest() -> None:
    placement = Placement(GpuPool.of_count(2), gpus=0.5)
    assert [placement.take("cuda") for _ in range(5)] == [("0",), ("0",), ("1",), ("1",), None]
    whole = Placement(GpuPool.of_count(1))
    assert whole.take("cuda") == ("0",) and whole.take("cuda") is None


def test_cpu_trials_see_no_gpu_and_a_node_without_gpus_sets_nothing() -> None:
    placement = Placement(GpuPool.of_count(2))
    assert placement.take("cpu") == () and placement.environment(()) == {GPU_VARIABLE: ""}
    assert Placement(GpuPool.of_count(0)).environment(()) == {}


def test_cuda_n_waits_for_gpu_n_and_a_trial_that_never_fits_is_refused() -> None:
    placement = Placement(GpuPool.of_count(2))
    assert placement.take("cuda:1") == ("1",) and placement.take("cuda:1") is None
    assert placement.take("cuda") == ("0",)
    with pytest.raises(PlacementError, match="cuda:2"):
        placement.check("cuda:2")
    with pytest.raises(PlacementError, match="asks for 4 GPUs"):
        Placement(GpuPool.of_count(2), gpus=4).check("cuda")
    with pytest.raises(PlacementError):
        Placement(GpuPool.of_count(0)).check("cuda")
