"""Checkpoints inside a training trial, and the exact resume from them (issue 39).

A checkpoint holds everything that decides the rest of a run: the model; each optimizer's state
(every part of a `Composite`) and its param groups' numbers; the state of the layerwise wrappers
hooked on its step (LISA's and Drop-Muon's sampling generators and counters, LLR's ratios: every
plain attribute of a hook's owner, or its own `state_dict`); which parameters require gradients
(the active layers); the scheduler and gradient scaler; the RNG states (Python, NumPy, torch CPU
and CUDA); the data generator (the data position); the loop's divergence reference and loss
window; the series and layer statistics so far; the step and token counters; the clock.

Files live under `$LAYERBENCH_CHECKPOINTS` (default: the cache's `checkpoints/`), one folder per
trial key, `step-NNNNNNNN.pt` each: a SHA-256 line, then `torch.save`'s bytes. They are written
to a temporary file, fsynced and renamed, so a kill or a full disk leaves the previous one whole;
they are read with `torch.load(weights_only=True)` after the checksum is verified, newest first,
falling back over corrupt ones (said in the log). A checkpoint of another trial key or method
version is refused. The runner removes a trial's folder when its result is stored.

When (`train.checkpoint`): every N steps, at each evaluation (`eval`), or every N seconds
(`600s`), keeping `keep` files. Unset, a trial checkpoints at each evaluation once it has run
`DEFAULT_AFTER_S` of wall time: tiny trials never write one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import logging
import os
import pickle
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from harness.diagnostics_geometry import WeightTracker
from harness.records import LayerStat, SeriesPoint, TrialResult
from harness.runner.checkpoint_paths import CHECKPOINTS_ENV, trial_folder
from harness.runner.distributed import gathered, load_sharded_model, sharded, sharded_like
from harness.spec.sections import CheckpointSpec

DEFAULT_AFTER_S = 300.0
"""Without a `train.checkpoint` section, a trial checkpoints at each evaluation after this."""
FORMAT = 1
log = logging.getLogger(__name__)


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written (a folder that is not writable, a full disk)."""


class ClockState(Protocol):
    start: float
    train_s: float
    eval_s: float


@dataclass
class LoopState:
    """The training loop's own state between steps."""

    initial: float | None = None
    """The first step's loss, the divergence check's reference."""
    window: list[float] = field(default_factory=list)
    """Losses since the last evaluation (its `train_loss` is their mean)."""


@dataclass
class Training:
    """The live objects of a training trial a checkpoint saves and restores."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler
    data: torch.Generator
    loop: LoopState
    result: TrialResult
    clock: ClockState
    weights: WeightTracker | None = None
    """The layer-rotation and spectral-norm diagnostics' reference weights and vectors."""


def every_of(spec: CheckpointSpec) -> tuple[int | None, float | None]:
    """(steps, seconds) between checkpoints; both None: at each evaluation."""
    if isinstance(spec.every, int):
        return spec.every, None
    if spec.every == "eval":
        return None, None
    return None, float(spec.every[:-1])


@dataclass
class Checkpoints:
    """A trial's checkpoint folder and its rule of when to write."""

    key: str
    versions: str
    """The trial's method versions (JSON): a checkpoint of other versions is refused."""
    spec: CheckpointSpec | None
    folder: Path = field(init=False)
    last_saved: float = field(default_factory=time.monotonic)
    notes: list[str] = field(default_factory=list)
    """What the trial's log says about its checkpoints (fallbacks, refusals)."""

    def __post_init__(self) -> None:
        self.folder = trial_folder(self.key)
        check_writable(self.folder)

    def due(self, step: int, evaluating: bool, wall_s: float) -> bool:
        if self.spec is None:
            return evaluating and wall_s >= DEFAULT_AFTER_S
        steps, seconds = every_of(self.spec)
        if steps is not None:
            return step % steps == 0
        if seconds is not None:
            return time.monotonic() - self.last_saved >= seconds
        return evaluating

    @property
    def keep(self) -> int:
        return self.spec.keep if self.spec else 2

    @property
    def keep_final(self) -> bool:
        return self.spec is not None and self.spec.keep_final

    def files(self) -> list[Path]:
        """The checkpoint files, newest first."""
        return sorted(self.folder.glob("step-*.pt"), reverse=True)

    def save(self, step: int, training: Training, write: bool = True) -> None:
        """Write the state after `step` atomically, then keep only the newest `keep` files.
        Every rank of a trial over several calls it (a sharded model's state is gathered);
        rank 0 alone writes (`write`)."""
        snapshot = self.snapshot(step, training)
        if not write:
            return
        payload = io.BytesIO()
        torch.save(snapshot, payload)
        write_atomic(self.folder / f"step-{step:08d}.pt", payload.getvalue())
        for old in self.files()[self.keep :]:
            old.unlink(missing_ok=True)
        self.last_saved = time.monotonic()

    def snapshot(self, step: int, training: Training) -> dict[str, Any]:
        """The state to save, an FSDP-sharded model's and optimizer's gathered in full."""
        result, clock = training.result, training.clock
        state = {
            "format": FORMAT,
            "key": self.key,
            "versions": self.versions,
            "step": step,
            "model": training.model.state_dict(),
            "optimizers": [optimizer_state(part) for part in parts(training.optimizer)],
            "wrappers": [hook_state(owner) for owner in hook_owners(training.optimizer)],
            "requires_grad": [p.requires_grad for p in training.model.parameters()],
            "scheduler": training.scheduler.state_dict(),
            "scaler": training.scaler.state_dict(),
            "rng": rng_state(),
            "data": training.data.get_state(),
            "loop": dataclasses.asdict(training.loop),
            "series": [dataclasses.asdict(point) for point in result.series],
            "layer_stats": [dataclasses.astuple(stat) for stat in result.layer_stats],
            "counters": {"steps_done": result.steps_done, "tokens": result.tokens},
            "resumes": {"count": result.resumes, "recomputed": result.recomputed_steps},
            "clock": {"train_s": clock.train_s, "eval_s": clock.eval_s, "wall_s": wall(clock)},
            "weights": training.weights.state_dict() if training.weights else None,
        }
        return gathered(state) if sharded(training.model) else state

    def newest(self) -> dict[str, Any] | None:
        """The newest valid checkpoint of this trial; corrupt or foreign ones are skipped and
        noted."""
        for path in self.files():
            try:
                state = read_verified(path)
            except (OSError, ValueError, RuntimeError, EOFError, pickle.UnpicklingError) as error:
                self.note(f"checkpoint {path} is unreadable ({error}); trying the previous one")
                continue
            if state.get("key") != self.key or state.get("versions") != self.versions:
                self.note(f"checkpoint {path} is of another trial or method version: refused")
                continue
            return state
        return None

    def resume(self, training: Training) -> int:
        """Restore the newest valid checkpoint into `training`; the step it was taken after
        (0: none, the trial starts afresh)."""
        state = self.newest()
        if state is None:
            return 0
        restore(state, training)
        recomputed = max(0, self.reached() - state["step"])
        training.result.resumes = state["resumes"]["count"] + 1
        training.result.recomputed_steps = state["resumes"]["recomputed"] + recomputed
        self.note(f"resumed from step {state['step']}")
        return int(state["step"])

    def mark(self, step: int) -> None:
        """Note the step reached (at each progress report), so a resume can count the steps it
        recomputes."""
        with contextlib.suppress(OSError):
            (self.folder / "reached").write_text(str(step))

    def reached(self) -> int:
        try:
            return int((self.folder / "reached").read_text())
        except (OSError, ValueError):
            return 0

    def note(self, message: str) -> None:
        log.warning("trial %s: %s", self.key[:12], message)
        self.notes.append(message)


def open_checkpoints(
    key: str | None, versions: dict[str, Any], spec: CheckpointSpec | None
) -> Checkpoints | None:
    """The checkpoints of trial `key` (None: a trial run outside a store, never checkpointed).
    A folder that cannot be written fails a trial whose suite asks for checkpoints; under the
    default rule the trial runs without them, and the log says so."""
    if key is None:
        return None
    try:
        return Checkpoints(key, json.dumps(versions, sort_keys=True, default=str), spec)
    except CheckpointError as error:
        if spec is not None:
            raise
        log.warning("trial %s runs without checkpoints: %s", key[:12], error)
        return None


def check_writable(folder: Path) -> None:
    """Fail before training, not at the first save, when the folder cannot be written."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
            pass
    except OSError as error:
        raise CheckpointError(
            f"the checkpoint folder {folder} is not writable ({error.strerror}); set "
            f"{CHECKPOINTS_ENV} to a writable folder (a shared file system on a cluster)"
        ) from None


def write_atomic(path: Path, payload: bytes) -> None:
    """A checksum line and `payload` to a temporary file, fsynced, renamed over `path`: a
    failure (a full disk) leaves the files that were there untouched."""
    digest = hashlib.sha256(payload).hexdigest().encode()
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        with open(temporary, "wb") as file:
            file.write(digest + b"\n" + payload)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        with contextlib.suppress(OSError):
            directory = os.open(path.parent, os.O_RDONLY)
            os.fsync(directory)
            os.close(directory)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise CheckpointError(f"could not write the checkpoint {path}: {error}") from None


def read_verified(path: Path) -> dict[str, Any]:
    """A checkpoint file's state, its checksum verified (ValueError if it does not match)."""
    data = path.read_bytes()
    digest, _, payload = data.partition(b"\n")
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        raise ValueError("checksum mismatch")
    state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError("not a LayerBench checkpoint of this format")
    return state


def wall(clock: ClockState) -> float:
    return time.perf_counter() - clock.start


def parts(optimizer: torch.optim.Optimizer) -> list[torch.optim.Optimizer]:
    """The optimizers holding state: a `Composite`'s parts, else the optimizer itself."""
    return list(getattr(optimizer, "parts", [optimizer]))


PLAIN = (int, float, bool, str, type(None))


def plain(value: Any) -> bool:
    """Numbers, strings, None, and lists or tuples of them (exact types: an enum is not)."""
    if type(value) in (list, tuple):
        return all(type(item) in PLAIN for item in value)
    return type(value) in PLAIN


def optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """An optimizer's state, and its groups' plain settings (the scheduled rates among them;
    objects such as Scion's norm types are rebuilt from the config)."""
    state = optimizer.state_dict()
    groups = [{k: v for k, v in group.items() if plain(v)} for group in state["param_groups"]]
    return {"state": state["state"], "param_groups": groups}


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """Load a saved state into the optimizer's own group dicts: the scheduler, a `Composite` and
    the wrappers hold references to them, which `load_state_dict`'s new dicts would orphan."""
    live = optimizer.param_groups
    current = optimizer.state_dict()["param_groups"]
    groups = [now | then for now, then in zip(current, saved["param_groups"], strict=True)]
    optimizer.load_state_dict({"state": saved["state"], "param_groups": groups})
    for group, loaded in zip(live, optimizer.param_groups, strict=True):
        group.update({k: v for k, v in loaded.items() if k != "params"})
    optimizer.param_groups = live


def hook_owners(optimizer: torch.optim.Optimizer) -> list[Any]:
    """The objects whose methods are hooked on the optimizer's step (the layerwise wrappers),
    in hook order, each once."""
    owners: dict[int, Any] = {}
    for optimizer_part in [optimizer, *parts(optimizer)]:
        for hooks in (
            optimizer_part._optimizer_step_pre_hooks,
            optimizer_part._optimizer_step_post_hooks,
        ):
            for hook in hooks.values():
                owner = getattr(hook, "__self__", None)
                if owner is not None and not isinstance(owner, torch.optim.Optimizer):
                    owners.setdefault(id(owner), owner)
    return list(owners.values())


def hook_state(owner: Any) -> dict[str, Any]:
    """A wrapper's state: its own `state_dict`, else its plain attributes (numbers, lists of
    numbers, NumPy arrays as tensors, torch generators' states)."""
    if hasattr(owner, "state_dict"):
        return {"state_dict": owner.state_dict()}
    state: dict[str, Any] = {}
    for name, value in vars(owner).items():
        if isinstance(value, torch.Generator):
            state[name] = ("generator", value.get_state())
        elif isinstance(value, np.ndarray):
            state[name] = ("array", torch.from_numpy(value.copy()))
        elif plain(value):
            state[name] = ("plain", value)
    return state


def load_hook_state(owner: Any, state: dict[str, Any]) -> None:
    if "state_dict" in state:
        owner.load_state_dict(state["state_dict"])
        return
    for name, (kind, value) in state.items():
        if kind == "generator":
            getattr(owner, name).set_state(value)
        elif kind == "array":
            setattr(owner, name, value.numpy())
        else:
            setattr(owner, name, value)


def rng_state() -> dict[str, Any]:
    numpy_state = np.random.get_state(legacy=False)
    return {
        "python": random.getstate(),
        "numpy": {
            "key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
            "pos": numpy_state["state"]["pos"],
            "has_gauss": numpy_state["has_gauss"],
            "gauss": numpy_state["gauss"],
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    python = state["python"]
    random.setstate((python[0], tuple(python[1]), python[2]))
    numpy = state["numpy"]
    np.random.set_state(
        {
            "bit_generator": "MT19937",
            "state": {"key": numpy["key"].numpy().astype(np.uint32), "pos": numpy["pos"]},
            "has_gauss": numpy["has_gauss"],
            "gauss": numpy["gauss"],
        }
    )
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def restore(state: dict[str, Any], training: Training) -> None:
    """Put a checkpoint's state back into a freshly built trial."""
    shards = sharded(training.model)
    if shards:
        load_sharded_model(training.model, state["model"])
    else:
        training.model.load_state_dict(state["model"])
    for part, saved in zip(parts(training.optimizer), state["optimizers"], strict=True):
        load_optimizer_state(part, sharded_like(saved, part) if shards else saved)
    owners = hook_owners(training.optimizer)
    for owner, saved in zip(owners, state["wrappers"], strict=True):
        load_hook_state(owner, saved)
    for p, flag in zip(training.model.parameters(), state["requires_grad"], strict=True):
        p.requires_grad_(flag)
    training.scheduler.load_state_dict(state["scheduler"])
    training.scaler.load_state_dict(state["scaler"])
    set_rng_state(state["rng"])
    training.data.set_state(state["data"])
    training.loop.initial = state["loop"]["initial"]
    training.loop.window[:] = state["loop"]["window"]
    result = training.result
    result.series[:] = [SeriesPoint(**point) for point in state["series"]]
    result.layer_stats[:] = [LayerStat(*stat) for stat in state["layer_stats"]]
    result.tokens = state["counters"]["tokens"]
    clock = training.clock
    clock.train_s, clock.eval_s = state["clock"]["train_s"], state["clock"]["eval_s"]
    clock.start = time.perf_counter() - state["clock"]["wall_s"]
    if training.weights is not None and state["weights"] is not None:
        training.weights.load_state_dict(state["weights"])
