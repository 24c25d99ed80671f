"""Does the machine that runs a suite's trials have the GPUs they ask for? Checked before any
trial starts when they run here (the local backend): a suite whose trials ask for CUDA
(`device: cuda`, `cuda:N`) on a machine without it, or for more GPUs than it has
(`resources.gpus`), is refused with the line to change (exit 2), instead of starting every
trial only to fail. On a cluster the trial process checks where it runs
(`harness.runner.devices`)."""

from __future__ import annotations

from collections.abc import Iterator

from harness.spec.loader import Loc, Locator, Problem
from harness.spec.resolve import method_chain, trial_settings
from harness.spec.schema import Suite


def device_problems(suite: Suite, locator: Locator, gpus: int) -> Iterator[Problem]:
    """What this machine, with `gpus` GPUs, cannot give the suite's trials, each at the line
    that asks for it."""
    seen: set[Loc] = set()
    for name in suite.methods:
        for point, settings in trial_settings(suite, name):
            message = device_message(settings.device, gpus)
            loc = device_loc(suite, name, "device" in point)
            if message and loc not in seen:
                seen.add(loc)
                yield locator.problem(loc, message)
    wanted = suite.resources.gpus
    if wanted is not None and wanted > gpus:
        yield locator.problem(
            ("resources", "gpus"),
            f"each trial asks for {wanted:g} GPU{'' if wanted == 1 else 's'} but this machine "
            f"has {gpus}; lower "
            "resources.gpus or run the suite where there are more (--backend slurm or ray)",
        )


def device_message(device: str, gpus: int) -> str | None:
    """Why `device` cannot run on a machine with `gpus` GPUs, None when it can."""
    if device.startswith("cuda") and gpus == 0:
        return (
            f"device '{device}' asks for a GPU but no CUDA device is reachable on this machine; "
            "set `device: auto` (a GPU where there is one, else the CPU) or `device: cpu`, or "
            "run the suite where there are GPUs (--backend slurm or ray)"
        )
    _, colon, index = device.partition(":")
    if colon and int(index) >= gpus:
        return (
            f"device '{device}' names a GPU this machine does not have (it has {gpus}); set "
            "`device: cuda` to use any free one"
        )
    return None


def device_loc(suite: Suite, method: str, swept: bool) -> Loc:
    """Where the device of `method`'s trials is written: its sweep, the nearest method of its
    `extends` chain that sets it, or `defaults`."""
    if swept:
        return ("methods", method, "sweep", "device")
    for name in reversed(method_chain(suite, method)):
        if "device" in suite.methods[name].model_fields_set:
            return ("methods", name, "device")
    return ("defaults", "device")
