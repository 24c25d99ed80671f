"""Warm trial processes: what every trial would otherwise redo, done once in the fork server.

The local runner forks each trial from a fork server (multiprocessing's `forkserver`) that
imports the harness once. Its preload list starts with `harness.runner.warm_start`, which pauses
the cyclic garbage collector for the server's start-up (`harness.utils.begin_startup`), and ends
with `harness.runner.warm_server`, whose import calls `warm_up`, which:

1. imports what the suite's trials would import lazily: transformers' model stack, lm-eval's
   model API and optimum-quanto when a trial loads a pretrained model, evaluates with lm-eval
   or quantizes (`MODEL_STACK`; seconds to import, so a suite that only trains the built-in
   `gpt` starts without them);
2. builds the training tasks of the suite (tokenized corpora, synthetic data sets), named in the
   environment variable `LAYERBENCH_WARM` when the runner starts the server, and keeps them
   here; `prebuilt_task` hands a trial the server's task when its section is one of them;
3. trains a tiny `gpt` for one step on the CPU, so that a trial's first step does not pay for
   PyTorch's lazy initialisation (kernels, autograd, the optimizer's paths);

and then freezes the heap and resumes the collector (`harness.utils.end_startup`), so that the
children's collector does not touch, and so copy, the pages they share with the server.

Each trial is still its own forked process: a crash, an out-of-memory kill or a time limit ends
only that trial. A task is a pure function of its section (corpus files, tokenizer, split seed,
data seed), so a prebuilt task gives the trial exactly the data it would build itself.
Nothing here touches CUDA: a process that has initialised CUDA cannot fork usable children.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from multiprocessing import forkserver
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from harness.cache import CACHE_ENV
from harness.logs import detach_stream_handlers
from harness.records import PlannedTrial
from harness.runner.checkpoint_paths import CHECKPOINTS_ENV
from harness.spec.recipe import TrialRecipe, train_task_section
from harness.utils import end_startup

if TYPE_CHECKING:
    from harness.registry import TrainTaskEntry
    from harness.tasks.base import Task

WARM_ENV = "LAYERBENCH_WARM"
MODEL_STACK = ("harness.models.gpt_hf", "lm_eval.api.model", "optimum.quanto")
"""Modules trials import only when they use them (`uses_model_stack`): transformers' model stack
(through the built-in gpt's `PreTrainedModel` face), lm-eval's model API, optimum-quanto."""

TRIAL_ENV = ("LAYERBENCH_DATA", CHECKPOINTS_ENV, *CACHE_ENV)
"""Environment variables a trial reads to find its files (the prepared datasets', its
checkpoints' folders, the cache of converted models and tokenizers): a forked trial sees the
fork server's environment, so a server started under other values is replaced
(`start_server`)."""

log = logging.getLogger(__name__)
_tasks: dict[str, Task] = {}
_server_imports: dict[int | None, set[str]] = {}
"""The model-stack modules each fork server this process started imported, by its pid."""
_server_env: dict[int | None, dict[str, str | None]] = {}
"""The `TRIAL_ENV` values each fork server this process started was started with, by its pid."""


def trial_env() -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in TRIAL_ENV}


def task_key(section: BaseModel) -> str:
    """A validated task section as a canonical string (the cache key of a prebuilt task)."""
    return json.dumps(section.model_dump(mode="json"), sort_keys=True)


def prebuilt_task(section: BaseModel) -> Task | None:
    """The task the fork server built for this section, if it built one."""
    return _tasks.get(task_key(section))


def uses_model_stack(recipe: TrialRecipe) -> bool:
    """Does this trial load a pretrained model (and evaluate it with lm-eval) or quantize?"""
    return recipe.kind.pretrained or recipe.quantize is not None


def warm_spec(trials: Iterable[PlannedTrial]) -> dict[str, Any]:
    """What the server should prepare for these trials: the distinct task sections of those that
    train, and the model stack if one of them uses it."""
    recipes = [trial.recipe for trial in trials]
    sections = {
        task_key(recipe.task): recipe.task.model_dump(mode="json")
        for recipe in recipes
        if not recipe.kind.pretrained
    }
    stack = any(uses_model_stack(recipe) for recipe in recipes)
    return {"tasks": list(sections.values()), "imports": list(MODEL_STACK) if stack else []}


def start_server(trials: Iterable[PlannedTrial]) -> None:
    """Start the fork server (if this process has none yet) warmed for `trials`.

    A server already running keeps what it prepared (a trial whose task it did not build
    builds its own), unless it lacks the model stack these trials use: then it is replaced by
    one that imports it, so that a process running several suites in turn (nightly, the
    tests) does not import the stack in every trial of the later ones. It is replaced too when
    it was started under other `TRIAL_ENV` values than this process has now. Call it between
    runs, never while trials forked from the server are running."""
    spec = warm_spec(trials)
    running = _server_pid()
    stale = _server_env.get(running) != trial_env()
    if running is not None and (
        stale or not set(spec["imports"]) <= _server_imports.get(running, set())
    ):
        _server_imports.pop(running, None)
        _server_env.pop(running, None)
        forkserver._forkserver._stop()  # type: ignore[attr-defined]
    os.environ[WARM_ENV] = json.dumps(spec)
    try:
        forkserver.ensure_running()
    finally:
        del os.environ[WARM_ENV]
    _server_imports.setdefault(_server_pid(), set(spec["imports"]))
    _server_env.setdefault(_server_pid(), trial_env())


def _server_pid() -> int | None:
    """The pid of this process's fork server, None before it starts (CPython's attribute)."""
    return forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined,no-any-return]


def warm_up(spec: Mapping[str, Any]) -> None:
    """Prepare this process (the fork server) for the trials of `spec` (see the module doc)."""
    import importlib

    for module in spec.get("imports", []):
        try:
            importlib.import_module(module)
        except ImportError:
            log.debug("warm: %s is not installed", module)
    for section in spec.get("tasks", []):
        try:
            entry, params = train_task_section(section)
            _tasks[task_key(params)] = train_task(entry, params)
        except Exception:  # the trial reports the error itself, with its own traceback
            log.debug("warm: task %s not built", section, exc_info=True)
    warm_step()


def train_task(entry: TrainTaskEntry, section: BaseModel) -> Task:
    """The training task of a validated task section (a pure function of the section)."""
    # each Task subclass takes its validated section (`Task` itself declares no constructor)
    return entry.obj(section)  # type: ignore[call-arg]


def warm_step() -> None:
    """One training step and one evaluation of a tiny `gpt` on random bytes, on the CPU, with
    one thread (no OpenMP thread pool is started before the fork)."""
    import torch

    from harness.models.catalog import GPTSpec
    from harness.models.gpt import build_gpt
    from harness.spec.recipe import model_norm
    from harness.spec.sections import NormSpec

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = build_gpt(
            GPTSpec(n_layers=2, d_model=32, n_heads=2, max_seq_len=16), model_norm(NormSpec()), 256
        )
        optimizer = torch.optim.AdamW(model.parameters())
        tokens = torch.randint(0, 256, (2, 17), generator=torch.Generator().manual_seed(0))
        for precision in (torch.float32, torch.bfloat16):
            with torch.autocast("cpu", dtype=precision, enabled=precision != torch.float32):
                logits = model(input_ids=tokens[:, :-1]).logits
                loss = torch.nn.functional.cross_entropy(
                    logits.float().flatten(0, 1), tokens[:, 1:].flatten()
                )
            torch.autograd.backward(loss)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():
            model.train(False)
            model(input_ids=tokens[:, :-1])
    finally:
        torch.set_num_threads(threads)


def warm_up_from_env() -> None:
    """`warm_up` for the spec the runner put in the environment (the server's preload), then
    the end of the server's start-up. Never raises: the fork server stops at an error other
    than ImportError in a preloaded module, and a cold trial is still a correct one."""
    try:
        warm_up(json.loads(os.environ.get(WARM_ENV) or "{}"))
    except Exception:
        log.warning("warm: the fork server was not warmed", exc_info=True)
    finally:
        detach_stream_handlers()  # those the lazy imports attached (see harness/logs.py)
        end_startup()
