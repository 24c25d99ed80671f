"""GPU placement of the local runner's trials: each running trial gets its own GPUs.

The local runner (`harness.runner.local`) starts up to `--workers` trials at once; on a node
with G GPUs each trial process is given the GPUs it needs as `CUDA_VISIBLE_DEVICES` (so
`cuda` in the trial is its first own GPU) and a trial waits until that many are free. Two
trials share a GPU only when the suite asks for a fraction (`resources.gpus: 0.5`): fractions
are packed onto the fullest GPU they fit on, as Ray packs fractional GPUs.

How many GPUs a trial needs: `resources.gpus` rounded up to whole GPUs when it is above 1
(Slurm rounds the same way), the fraction itself below 1, and when unset 1 for a trial whose
device is CUDA (`cuda`, `cuda:N`, or `auto` on a node with GPUs), else 0. A trial that needs
no GPU on a node with GPUs sees none (`CUDA_VISIBLE_DEVICES` empty).

Why an environment variable is enough with the warm fork server: the server imports torch but
never initialises CUDA (`harness.runner.warm` runs its warm-up step on the CPU; a process that
has initialised CUDA cannot fork usable children anyway), and torch does not cache the device
count before CUDA is initialised. Each forked trial sets the variable (`forked_trial`) before
anything in it touches CUDA, so the CUDA driver, which reads it when the trial first
initialises CUDA, shows the trial only its own GPUs. `torch.cuda.set_device` per trial would
instead leave every GPU visible to every trial (each one's allocator and CUDA context could
still land on GPU 0) and would not give `cuda` the meaning Slurm and Ray give it.

Pure: the GPUs are counted without torch (`visible_gpus`), and tests pass a fake count.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

GPU_VARIABLE = "CUDA_VISIBLE_DEVICES"
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
"""One folder per GPU the NVIDIA driver sees (as `harness.env.cuda_available` reads it)."""
EPSILON = 1e-9


def visible_gpus(
    environ: Mapping[str, str] | None = None, driver: Path = NVIDIA_GPUS
) -> tuple[str, ...]:
    """The GPUs this process may use, as `CUDA_VISIBLE_DEVICES` names them: its own value when
    set (indices or UUIDs; empty or -1: none), else indices 0..G-1 of the driver's GPUs."""
    environ = os.environ if environ is None else environ
    given = environ.get(GPU_VARIABLE)
    if given is not None:
        names = tuple(name.strip() for name in given.split(",") if name.strip())
        return () if names[:1] == ("-1",) else names
    count = sum(1 for _ in driver.iterdir()) if driver.is_dir() else 0
    return tuple(str(index) for index in range(count))


def pinned_index(device: str) -> int | None:
    """N of a `cuda:N` device, None for any other."""
    _, colon, index = device.partition(":")
    return int(index) if colon and index.isdigit() else None


def gpus_needed(device: str, gpus: float | None, node_gpus: int) -> float:
    """The GPUs a trial of `device` needs under the suite's `resources.gpus` (None: unset) on a
    node with `node_gpus` GPUs (see the module docstring)."""
    if gpus is None:
        wants = device.startswith("cuda") or (device == "auto" and node_gpus > 0)
        return 1.0 if wants else 0.0
    return float(math.ceil(gpus)) if gpus > 1 else float(gpus)


class PlacementError(ValueError):
    """A trial needs more GPUs than this node has: it could never start."""


@dataclass
class GpuPool:
    """The node's GPUs and how much of each the running trials hold (1.0: a whole GPU)."""

    gpus: tuple[str, ...]
    held: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of_count(cls, count: int) -> GpuPool:
        """A pool of GPUs 0..count-1 (a fake count in tests)."""
        return cls(tuple(str(index) for index in range(count)))

    def free(self, gpu: str) -> float:
        return 1.0 - self.held.get(gpu, 0.0)

    def check(self, need: float, index: int | None = None) -> None:
        """Raise `PlacementError` when a trial needing `need` GPUs (GPU `index` of this node's,
        for `cuda:N`) can never be placed here."""
        if need > len(self.gpus) + EPSILON:
            raise PlacementError(
                f"a trial asks for {need:g} GPUs (resources.gpus) but this machine has "
                f"{len(self.gpus)}; lower resources.gpus or run on a machine with more GPUs"
            )
        if index is not None and index >= len(self.gpus):
            raise PlacementError(
                f"device 'cuda:{index}' names a GPU this machine does not have (it has "
                f"{len(self.gpus)}); set device: cuda to use any free one"
            )

    def choose(self, need: float, index: int | None = None) -> tuple[str, ...] | None:
        """The GPUs a trial needing `need` would take now, None when they are not free yet: a
        whole number takes that many idle GPUs, a fraction a share of the fullest GPU with room
        for it, 0 none; `index` (`cuda:N`) pins its first GPU to the node's GPU N."""
        self.check(need, index)
        if need <= 0:
            return ()
        if index is not None:
            pinned = self.gpus[index]
            return (pinned,) if self.free(pinned) + EPSILON >= min(need, 1.0) else None
        if need < 1:
            fits = [gpu for gpu in self.gpus if self.free(gpu) + EPSILON >= need]
            chosen = sorted(fits, key=self.free)[:1]
        else:
            idle = [gpu for gpu in self.gpus if self.held.get(gpu, 0.0) <= EPSILON]
            chosen = idle[: int(need)] if len(idle) >= need else []
        return tuple(chosen) or None

    def place(self, need: float, index: int | None = None) -> tuple[str, ...] | None:
        """`choose`, the GPUs chosen now held by the trial."""
        chosen = self.choose(need, index)
        if not chosen:
            return chosen
        share = need if need < 1 else 1.0
        for gpu in chosen:
            self.held[gpu] = self.held.get(gpu, 0.0) + share
        return tuple(chosen)

    def release(self, placed: tuple[str, ...], need: float) -> None:
        """Give back what `place` gave a trial needing `need`."""
        share = need if need < 1 else 1.0
        for gpu in placed:
            left = self.held.get(gpu, 0.0) - share
            if left > EPSILON:
                self.held[gpu] = left
            else:
                self.held.pop(gpu, None)


@dataclass
class Placement:
    """The local runner's GPU placement for a suite: its pool and `resources.gpus`."""

    pool: GpuPool
    gpus: float | None = None
    """The suite's `resources.gpus` (None: unset)."""

    @classmethod
    def here(cls, gpus: float | None = None) -> Placement:
        """Placement over the GPUs this process may use."""
        return cls(GpuPool(visible_gpus()), gpus)

    def need(self, device: str) -> float:
        return gpus_needed(device, self.gpus, len(self.pool.gpus))

    def check(self, device: str) -> None:
        """Raise `PlacementError` when a trial of `device` could never start here."""
        self.pool.check(self.need(device), pinned_index(device))

    def ready(self, device: str) -> bool:
        """Are the GPUs a trial of `device` needs free now?"""
        return self.pool.choose(self.need(device), pinned_index(device)) is not None

    def take(self, device: str) -> tuple[str, ...] | None:
        """The GPUs a trial of `device` runs on, held until `give_back`; None: wait. The
        trial sees them as `cuda` (`TrialRecipe.on_worker`), `cuda:N` included."""
        return self.pool.place(self.need(device), pinned_index(device))

    def give_back(self, device: str, placed: tuple[str, ...]) -> None:
        self.pool.release(placed, self.need(device))

    def environment(self, placed: tuple[str, ...]) -> dict[str, str | None]:
        """What the trial's process sets: its GPUs as `CUDA_VISIBLE_DEVICES` (none visible when
        it needs none on a node with GPUs); nothing on a node without GPUs."""
        if not self.pool.gpus:
            return {}
        return {GPU_VARIABLE: ",".join(placed)}
