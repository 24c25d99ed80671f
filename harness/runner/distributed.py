"""One trial over several processes (ranks) with torch.distributed: DDP or FSDP2 (issue 40).

A trial whose suite asks for more than one rank (`resources.tasks`, `gpus`, `nodes`: the
recipe's `ranks`) is started in one of two ways:

- by the local backend (or any caller of `run_trial` outside a rank): `launch` starts torch's
  elastic launcher, `python -m torch.distributed.run --standalone --nproc-per-node N` (what
  `torchrun` runs), on `harness.runner.rank`, and waits for it; rank 0 connects back to the
  launching process, streams its progress and sends the trial's result, which the launcher
  returns as the trial's one result;
- by a cluster scheduler that starts every rank itself (Slurm's `srun`: `export_slurm_ranks`
  sets torch's variables from Slurm's), each rank calling `run_trial` in its own process.

In each rank, `join` opens the process group (NCCL on CUDA, gloo on the CPU) and `wrap` wraps
the model: `DistributedDataParallel`, or FSDP2's `fully_shard` on each block and on the whole
model. Every rank draws the same global batch from the same data generator and trains on its
own contiguous slice (`Ranks.share`), so the global batch is the single process's; the
gradients are averaged by DDP's all-reduce (FSDP's reduce-scatter), so the update is the
single process's full-batch update. The loss each step reports is the mean over ranks. Every
rank evaluates and computes the diagnostics on the whole model (DDP: its full replica, whose
gradients are the all-reduced ones; FSDP: the sharded weights gathered), so they are those of
the full model, not of one rank's shard or batch; rank 0 alone reports, returns the result the
runner stores (and MLflow tracks) and writes checkpoints, which every rank restores
(`harness.runner.checkpoint`; FSDP gathers the full state for rank 0 to write, and reshards it
when it resumes: `torch.distributed.checkpoint.state_dict.set_model_state_dict`, the optimizer
state by its parameters' placements). A stop (time limit, divergence) is agreed by all ranks
(`Ranks.any`), so none is left waiting.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from harness.core import Status
from harness.methods.layers import blocks
from harness.records import TrialResult
from harness.runner.process import die_with_parent
from harness.spec.recipe import TrialRecipe
from harness.tasks.base import Batch

ADDRESS_ENV = "LAYERBENCH_RANK0_ADDRESS"
"""host:port where the launcher listens for rank 0's progress and result."""
AUTH_ENV = "LAYERBENCH_RANK0_AUTH"
"""The launcher's connection key (hex), so that no other process can send a result."""
LOG_TAIL = 4000
"""Characters of the ranks' output a failed launch keeps as the trial's error."""


@dataclass(frozen=True)
class Ranks:
    """This process's place among a trial's ranks (rank 0 of 1 for a single process)."""

    rank: int = 0
    world: int = 1
    local: int = 0

    @property
    def lead(self) -> bool:
        """Rank 0: the one that reports, checkpoints and returns the trial's result."""
        return self.rank == 0

    def share(self, batch: Batch) -> Batch:
        """This rank's contiguous slice of the global batch (the whole batch for one rank)."""
        if self.world == 1:
            return batch
        size = batch[0].shape[0] // self.world
        return tuple(tensor[self.rank * size : (self.rank + 1) * size] for tensor in batch)

    def mean(self, value: torch.Tensor) -> float:
        """The mean of a scalar over the ranks (the value itself for one rank)."""
        if self.world == 1:
            return float(value.item())
        total = value.detach().float().reshape(1).clone()
        dist.all_reduce(total)
        return float(total.item()) / self.world

    def any(self, flag: bool) -> bool:
        """Whether `flag` holds on any rank: a decision every rank then takes together."""
        if self.world == 1:
            return flag
        value = torch.tensor([float(flag)], device=collective_device())
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item() > 0)


SINGLE = Ranks()


def in_rank() -> bool:
    """Is this process one rank of a launched trial (torchrun's or Slurm's variables set)?"""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def collective_device() -> torch.device:
    """Where this process group's collectives take their tensors (NCCL: the rank's GPU)."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def join(recipe: TrialRecipe, device: torch.device) -> tuple[Ranks, torch.device]:
    """This rank's place, its process group opened (NCCL on CUDA, gloo on the CPU), and its
    device (`cuda:LOCAL_RANK` on CUDA); a single-process trial stays as it is."""
    if recipe.ranks == 1:
        return SINGLE, device
    world = int(os.environ["WORLD_SIZE"])
    if world != recipe.ranks:
        raise RuntimeError(
            f"the trial asks for {recipe.ranks} ranks but was started with {world} (WORLD_SIZE)"
        )
    ranks = Ranks(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))
    if device.type == "cuda":
        device = torch.device("cuda", ranks.local)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return ranks, device


def wrap(model: nn.Module, parallel: str, ranks: Ranks) -> nn.Module:
    """The module the training step runs: the model itself for one rank; DDP around it; or,
    for FSDP, the model itself, each block and then the whole model sharded in place
    (`fully_shard`), so its optimizer must be built after this."""
    if ranks.world == 1:
        return model
    if parallel == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for block in blocks(model):
            fully_shard(block)
        fully_shard(model)
        return model
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [torch.cuda.current_device()] if dist.get_backend() == "nccl" else None
    return DistributedDataParallel(model, device_ids=device_ids)


@contextmanager
def synced(step_model: nn.Module, last: bool) -> Iterator[None]:
    """A micro-batch's backward: the gradients are all-reduced on the last one only (DDP's
    `no_sync`, FSDP2's `set_requires_gradient_sync`)."""
    no_sync: Callable[[], AbstractContextManager[None]] | None = getattr(
        step_model, "no_sync", None
    )  # DDP
    set_sync: Callable[[bool], None] | None = getattr(
        step_model, "set_requires_gradient_sync", None
    )  # FSDP2
    if last or (no_sync is None and set_sync is None):
        yield
    elif no_sync is not None:
        with no_sync():
            yield
    elif set_sync is not None:
        set_sync(False)
        try:
            yield
        finally:
            set_sync(True)


def sharded(model: nn.Module) -> bool:
    """Is this model's state sharded over the ranks (FSDP2)?"""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def gathered(state: Any) -> Any:
    """A checkpoint's state with every sharded tensor (DTensor) gathered in full: a collective,
    which every rank calls on states of the same structure."""
    from torch.distributed.tensor import DTensor

    if isinstance(state, DTensor):
        return state.full_tensor()
    if isinstance(state, dict):
        return {name: gathered(value) for name, value in state.items()}
    if isinstance(state, list | tuple):
        return type(state)(gathered(value) for value in state)
    return state


def load_sharded_model(model: nn.Module, state: dict[str, Any]) -> None:
    """Load a full model state into an FSDP-sharded model (each rank keeps its shard:
    `torch.distributed.checkpoint.state_dict.set_model_state_dict`)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))


def sharded_like(saved: dict[str, Any], optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """A saved optimizer state of full tensors, each of a sharded parameter's shape sharded
    as that parameter is (its DTensor mesh and placements), so it loads into `optimizer`."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    params = [p for group in optimizer.param_groups for p in group["params"]]
    state = {}
    for index, values in saved["state"].items():
        p = params[int(index)]
        state[index] = {
            name: distribute_tensor(value.to(p.device), p.device_mesh, p.placements)
            if isinstance(p, DTensor) and isinstance(value, torch.Tensor) and value.shape == p.shape
            else value
            for name, value in values.items()
        }
    return {**saved, "state": state}


def export_slurm_ranks() -> None:
    """torch.distributed's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)
    from those of the Slurm task this process is (submitit's helper), when it is one task of
    several; on one node, rank 0 is reached at 127.0.0.1."""
    if int(os.environ.get("SLURM_NTASKS", "1")) > 1 and not in_rank():
        from submitit.helpers import TorchDistributedEnvironment

        TorchDistributedEnvironment().export(set_cuda_visible_devices=False)  # cuda:LOCAL_RANK
        if int(os.environ.get("SLURM_JOB_NUM_NODES", "1")) == 1:
            os.environ["MASTER_ADDR"] = "127.0.0.1"  # one node: its Slurm name may not resolve


Report = Callable[[int, int, float], None]


def launch(config: Mapping[str, Any], ranks: int, report: Report, key: str | None) -> TrialResult:
    """Run a trial of `ranks` ranks here under torch's elastic launcher and return rank 0's
    result (see the module docstring). `report` is called with rank 0's progress; if it raises,
    the ranks are killed and the exception propagates (as a kill of the trial would)."""
    authkey = secrets.token_bytes(16)
    with (
        tempfile.TemporaryDirectory(prefix="layerbench-ranks-") as folder,
        Listener(("127.0.0.1", 0), authkey=authkey) as listener,
    ):
        config_path = Path(folder) / "config.json"
        config_path.write_text(json.dumps(config))
        host, port = listener.address
        env = {**os.environ, ADDRESS_ENV: f"{host}:{port}", AUTH_ENV: authkey.hex()}
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={ranks}",
            "-m",
            "harness.runner.rank",
            str(config_path),
            key or "",
        ]
        log_path = Path(folder) / "ranks.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                command,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
            try:
                result = relay(listener, process, report)
            finally:
                stop(process)
        if result is None or (result.status is Status.RUNNING):
            output = log_path.read_text(errors="replace")[-LOG_TAIL:]
            return TrialResult(
                Status.FAILED,
                error=f"the trial's ranks exited with code {process.returncode} without a "
                f"result; their output ends:\n{output}",
            )
        return result


def relay(
    listener: Listener, process: subprocess.Popen[bytes], report: Report
) -> TrialResult | None:
    """Pass rank 0's progress to `report` until its result comes or the launcher ends."""
    messages: queue.Queue[Any] = queue.Queue()
    threading.Thread(target=receive, args=(listener, messages), daemon=True).start()
    while True:
        try:
            message = messages.get(timeout=0.2)
        except queue.Empty:
            if process.poll() is not None and messages.empty():
                return None
            continue
        if message[0] == "result":
            process.wait()
            result: TrialResult = message[1]
            return result
        if message[0] == "progress":
            report(*message[1:])


def receive(listener: Listener, messages: queue.Queue[Any]) -> None:
    """Rank 0's messages, put on `messages` (a thread: `accept` blocks)."""
    try:
        with listener.accept() as conn:
            for message in iter_messages(conn):
                messages.put(message)
    except OSError:
        pass  # the launcher closed the listener: the trial is over


def iter_messages(conn: Connection) -> Iterator[Any]:
    while True:
        try:
            yield conn.recv()
        except EOFError:
            return


def stop(process: subprocess.Popen[bytes]) -> None:
    """End the launcher and its ranks (its session), if still running."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
