"""Typed registries, one per method family, with lazy entries.

Modelled on lm-evaluation-harness's registry: a name collision is an error and an unknown name
raises with a "did you mean" suggestion. A built-in entry is *declared* in its package's
`catalog` module with its parameter model, its typed capabilities and a "module:attr" path to
its implementation; the implementation is imported on first use of `Entry.obj`. So validating
and planning a suite read names and schemas without importing torch or transformers. A plugin
registers an object directly with the `register` decorator.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from pydantic import BaseModel

from harness.core import Direction

if TYPE_CHECKING:
    import torch
    from torch import nn

    from harness.methods.placement import Placement
    from harness.methods.pruning import Criterion  # noqa: F401 (named in strings)
    from harness.methods.quantization import Importance, Scheme  # noqa: F401
    from harness.models.pretrained import LoadedModel
    from harness.spec.recipe import ModelNorm
    from harness.spec.schema import LayerwiseSpec, OptimizerSpec
    from harness.tasks.base import EvalTask, Task
    from harness.tasks.corpora import Corpus, Tokenizer
    from harness.tasks.synthetic import SyntheticKind

T = TypeVar("T")

INITIAL_VERSION = 1
"""Every entry's first version; a trial key names only the entries above it, so the keys of
trials stored before entries had versions are unchanged."""


class RegistryError(LookupError):
    """An unknown or duplicate name in a registry."""


class UnknownNameError(RegistryError, ValueError):
    """A name no entry has; a ValueError too, so Pydantic reports it from inside a validator."""

    def __init__(self, family: str, name: str, known: list[str]) -> None:
        self.family, self.name, self.known = family, name, known
        self.suggestion = suggest(name, known)
        hint = f"; did you mean '{self.suggestion}'?" if self.suggestion else ""
        super().__init__(f"unknown {family} '{name}'{hint} (known: {', '.join(known)})")


def suggest(name: str, known: list[str]) -> str | None:
    """The closest known name to `name`, if any is close enough."""
    matches = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return matches[0] if matches else None


def resolve(path: str) -> Any:
    """The object at "package.module:attr" (imports the module)."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True, kw_only=True)
class Entry(Generic[T]):
    """One registered method, model, task or metric.

    `target` is the object itself or a "module:attr" path imported on first use of `obj`.
    `version` is bumped when a change of the implementation can change results (lm-eval's task
    versions); `libraries` are the distributions whose code implements it (their installed
    versions enter the key of a trial that uses it: `harness.spec.plan.trial_key`).
    """

    name: str
    family: str
    target: T | str
    params: type[BaseModel] | None = None
    summary: str = ""
    version: int = INITIAL_VERSION
    libraries: tuple[str, ...] = ()
    missing: Callable[[Any], str | None] | None = None
    """(its validated section) -> the command that installs the data or model it needs and
    lacks here, or None (tasks and models; see `harness.store.coverage`)."""
    _resolved: list[T] = field(default_factory=list, repr=False, compare=False)

    @property
    def obj(self) -> T:
        if not isinstance(self.target, str):
            return self.target
        if not self._resolved:
            self._resolved.append(resolve(self.target))
        return self._resolved[0]

    @property
    def module(self) -> str | None:
        """The module that holds a lazy entry's implementation."""
        return self.target.partition(":")[0] if isinstance(self.target, str) else None

    @property
    def doc(self) -> str:
        """The first line of the declared summary, else of the implementation's docstring."""
        lines = (self.summary or getattr(self.obj, "__doc__", None) or "").strip().splitlines()
        return lines[0] if lines else ""


E = TypeVar("E", bound=Entry[Any])


class Registry(Generic[E]):
    """Names of one family mapped to their entries, of type `entry_type`.

    The `catalog` module, imported on first lookup, declares the built-in entries.
    """

    def __init__(self, family: str, entry_type: type[E], catalog: str | None = None) -> None:
        self.family = family
        self.entry_type = entry_type
        self._catalog = catalog
        self._entries: dict[str, E] = {}
        self._loaded = catalog is None

    def register(
        self,
        name: str,
        *,
        params: type[BaseModel] | None = None,
        kind: type[E] | None = None,
        **capabilities: Any,
    ) -> Callable[[T], T]:
        """Decorator: register `obj` under `name` now (a plugin's way); `params` is the schema
        of its suite fields and `capabilities` the typed fields of the family's entry type."""

        def decorator(obj: T) -> T:
            self.add(name, obj, params=params, kind=kind, **capabilities)
            return obj

        return decorator

    def add(self, name: str, target: Any, *, kind: type[E] | None = None, **fields: Any) -> None:
        """Add an entry: `target` is the object or its "module:attr" path (imported on first
        use); `kind` is the entry type when the family has several (default `entry_type`)."""
        if name in self._entries:
            raise RegistryError(f"{self.family} '{name}' is already registered")
        entry_type = kind or self.entry_type
        self._entries[name] = entry_type(name=name, family=self.family, target=target, **fields)

    declare = add

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            importlib.import_module(self._catalog or "")

    def entry(self, name: str) -> E:
        self._load()
        if name not in self._entries:
            raise UnknownNameError(self.family, name, self.names())
        return self._entries[name]

    def get(self, name: str) -> Any:
        """The implementation of `name` (`entry(name).obj`, typed by the entry)."""
        return self.entry(name).obj

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def entries(self) -> Iterator[E]:
        self._load()
        yield from (self._entries[name] for name in sorted(self._entries))

    def __contains__(self, name: object) -> bool:
        self._load()
        return isinstance(name, str) and name in self._entries

    @contextmanager
    def scoped(self) -> Iterator[Registry[E]]:
        """Within the block, entries may be added (a plugin tried once, a test's stand-in); on
        leaving it the registry holds again exactly the entries it held on entering."""
        self._load()
        saved = dict(self._entries)
        try:
            yield self
        finally:
            self._entries.clear()
            self._entries.update(saved)


# Each family's entry type: what its implementation is (the protocol) and its capabilities.

NormFactory = Callable[..., "nn.Module"]
"""(dim, role, eps, **params) -> the norm module."""
OptimizerFactory = Callable[["nn.Module", "OptimizerSpec"], "torch.optim.Optimizer"]
Schedule = Callable[[int, int, int, float], float]
"""(step, total steps, warmup steps, min ratio) -> the learning-rate multiplier."""
LayerwiseWrapper = Callable[["torch.optim.Optimizer", "nn.Module", "LayerwiseSpec"], Any]
ModelBuilder = Callable[[Any, "ModelNorm", int], "nn.Module"]
"""(the model section, the norm settings with their parameters validated, the vocabulary size)
-> an untrained model."""
PretrainedLoader = Callable[[Any], "LoadedModel"]
"""The model section -> a pretrained model and its tokenizer."""
Fingerprint = Callable[[Any], str]
TrivialLevels = Callable[[Any], dict[str, float]]
"""The task section -> the value of each metric a trivial predictor scores (torch-free; see
harness/tasks/trivial.py)."""
"""The task section -> a hash of the data it reads (cheap: no tokenizing, no torch)."""


@dataclass(frozen=True, kw_only=True)
class PlacementEntry(Entry[type["Placement"]]):
    pass


@dataclass(frozen=True, kw_only=True)
class NormTypeEntry(Entry[NormFactory]):
    scale_embeddings: bool = False
    """The norm needs a learnable sqrt(d) scale on the embeddings (DyT, Derf)."""
    model_width: bool = False
    """The factory takes the model's width as `model_width` (DyT, Derf: alpha_0 depends on it)."""


@dataclass(frozen=True, kw_only=True)
class OptimizerEntry(Entry[OptimizerFactory]):
    on_device: Callable[[dict[str, Any], bool], dict[str, Any]] | None = None
    """Resolves the section's per-device `auto` values given whether the trial runs on a GPU;
    planning stores the result in the trial config, so the key names the value that runs."""


@dataclass(frozen=True, kw_only=True)
class ScheduleEntry(Entry[Schedule]):
    pass


@dataclass(frozen=True, kw_only=True)
class LayerwiseEntry(Entry[LayerwiseWrapper]):
    pass


PruneTarget = Literal["block", "attention", "mlp"]
ALL_TARGETS: tuple[PruneTarget, ...] = ("block", "attention", "mlp")


@dataclass(frozen=True, kw_only=True)
class PruningEntry(Entry["Criterion"]):
    targets: tuple[PruneTarget, ...] = ALL_TARGETS
    """What the criterion can remove: whole blocks, attention or MLP sublayers."""


@dataclass(frozen=True, kw_only=True)
class QuantizerEntry(Entry["Scheme"]):
    bits: frozenset[int]
    """The bit widths the scheme supports."""
    options: frozenset[str] = frozenset()
    """The QuantizeSpec options (`symmetric`, `group_size`, `act_order`, `damp`) it honours;
    others must keep their defaults."""
    calibrated: bool = False
    """The scheme needs each block's calibration inputs (GPTQ): `(block, bits, spec, calls)`."""


@dataclass(frozen=True, kw_only=True)
class ImportanceEntry(Entry["Importance"]):
    pass


@dataclass(frozen=True, kw_only=True)
class TrainableModelEntry(Entry[ModelBuilder]):
    """A model built from its section and trained by the trial."""


@dataclass(frozen=True, kw_only=True)
class PretrainedModelEntry(Entry[PretrainedLoader]):
    """A pretrained model loaded with its tokenizer and only evaluated."""


ModelEntry = TrainableModelEntry | PretrainedModelEntry


@dataclass(frozen=True, kw_only=True)
class TrainTaskEntry(Entry[type["Task"]]):
    """A task that trains a model: batches, loss, evaluation. `metrics`: the final metrics it
    emits (names in `METRICS`, which gives their direction); `trivial` gives the level of its
    trivial predictor (None: the trials report it, or the task has none)."""

    fingerprint: Fingerprint
    metrics: tuple[str, ...] = ()
    trivial: TrivialLevels | None = None


@dataclass(frozen=True, kw_only=True)
class EvalTaskEntry(Entry[type["EvalTask"]]):
    """A task that evaluates a pretrained model with its own tokenizer. `metrics`: as a
    `TrainTaskEntry`'s (an lm-eval task's are those of any lm-eval task this harness reads)."""

    fingerprint: Fingerprint
    metrics: tuple[str, ...] = ()


TaskEntry = TrainTaskEntry | EvalTaskEntry


@dataclass(frozen=True, kw_only=True)
class SyntheticKindEntry(Entry[type["SyntheticKind"]]):
    """`classes` gives the number of answer classes of the kind's parameters: its chance level
    is a uniform guess among them (None: no chance level declared)."""

    classes: Callable[[Any], int] | None = None


@dataclass(frozen=True, kw_only=True)
class CorpusEntry(Entry[Callable[[], "Corpus"]]):
    pass


@dataclass(frozen=True, kw_only=True)
class TokenizerEntry(Entry[type["Tokenizer"]]):
    pass


@dataclass(frozen=True)
class Metric:
    """A metric and whether lower or higher values are better."""

    direction: Direction
    description: str


METHODS = "harness.methods.catalog"
NORM_PLACEMENTS = Registry("norm placement", PlacementEntry, METHODS)
NORM_TYPES = Registry("norm type", NormTypeEntry, METHODS)
OPTIMIZERS = Registry("optimizer", OptimizerEntry, METHODS)
SCHEDULES = Registry("schedule", ScheduleEntry, METHODS)
LAYERWISE = Registry("layerwise wrapper", LayerwiseEntry, METHODS)
PRUNING = Registry("pruning criterion", PruningEntry, METHODS)
QUANTIZERS = Registry("quantization scheme", QuantizerEntry, METHODS)
LAYER_IMPORTANCE = Registry("layer importance", ImportanceEntry, METHODS)
MODELS = Registry[ModelEntry]("model type", TrainableModelEntry, "harness.models.catalog")
TASKS = Registry[TaskEntry]("task type", TrainTaskEntry, "harness.tasks.catalog")
SYNTHETIC_KINDS = Registry("synthetic task kind", SyntheticKindEntry, "harness.tasks.catalog")
CORPORA = Registry("corpus", CorpusEntry, "harness.tasks.corpora")
TOKENIZERS = Registry("tokenizer", TokenizerEntry, "harness.tasks.corpora")
METRICS = Registry("metric", Entry[Metric])

FAMILIES: dict[str, Registry[Any]] = {  # Registry[Any]: a mapping over every family
    "norm.placement": NORM_PLACEMENTS,
    "norm.type": NORM_TYPES,
    "optimizer.name": OPTIMIZERS,
    "optimizer.layerwise": LAYERWISE,
    "train.schedule": SCHEDULES,
    "prune.criterion": PRUNING,
    "quantize.scheme": QUANTIZERS,
    "quantize.layerwise.importance": LAYER_IMPORTANCE,
    "model.type": MODELS,
    "task.type": TASKS,
    "synthetic.kind": SYNTHETIC_KINDS,
    "corpus": CORPORA,
    "tokenizer": TOKENIZERS,
    "metric": METRICS,
}

MIN, MAX = Direction.MIN, Direction.MAX
for _name, _direction, _description in [
    ("val_loss", MIN, "in-distribution validation loss (nats per token)"),
    ("val_ppl", MIN, "validation perplexity"),
    ("bits_per_byte", MIN, "bits per byte of text (lm: validation; perplexity: its split)"),
    ("test_loss", MIN, "held-out test loss (reporting split; at the end of training)"),
    ("test_ppl", MIN, "test perplexity at the end of training"),
    ("test_bits_per_byte", MIN, "test bits per byte at the end of training"),
    ("train_loss", MIN, "training loss (mean over the last logging window)"),
    ("id_loss", MIN, "in-distribution loss of a synthetic task"),
    ("ood_loss", MIN, "out-of-distribution loss of a synthetic task"),
    ("id_acc", MAX, "in-distribution accuracy of a synthetic task"),
    ("acc", MAX, "accuracy (lm-eval)"),
    ("acc_norm", MAX, "length-normalized accuracy (lm-eval)"),
    ("word_perplexity", MIN, "word perplexity (lm-eval)"),
    ("byte_perplexity", MIN, "byte perplexity (lm-eval)"),
    ("effective_bits", MIN, "parameter-weighted bits per quantized weight"),
    ("model_bytes", MIN, "bytes of the model's weights after compression"),
    ("layers_removed", MAX, "layers removed by pruning"),
    ("tokens_per_s", MAX, "training throughput (tokens per second of train time)"),
    ("params", MIN, "number of parameters"),
    ("ood_acc", MAX, "out-of-distribution accuracy of a synthetic task"),
    ("test_acc", MAX, "held-out test accuracy at the end of training (synthetic: ID test set)"),
    ("val_bits_per_byte", MIN, "validation (tuning split) bits per byte of a perplexity task"),
    ("val_acc", MAX, "accuracy on the task's validation split (lm-eval, tuning split)"),
    ("val_acc_norm", MAX, "length-normalized accuracy on the validation split (lm-eval)"),
    ("val_word_perplexity", MIN, "word perplexity on the validation split (lm-eval)"),
    ("val_byte_perplexity", MIN, "byte perplexity on the validation split (lm-eval)"),
    ("layers", MIN, "blocks left after pruning"),
]:
    METRICS.add(_name, Metric(_direction, _description), summary=_description)


TRIAL_METRICS = ("train_loss", "tokens_per_s", "params")
"""What every training trial reports besides its task's metrics (`harness.runner.trial`)."""
COMPRESSION_METRICS = ("layers_removed", "layers", "effective_bits", "model_bytes")
"""What a pruned or quantized trial reports (`harness.runner.posttrain`)."""


def undeclared_metrics(task_type: str, names: Iterable[str]) -> list[str]:
    """The metric names a trial of `task_type` stored that neither its task's catalog entry
    (`metrics=`) nor the runner declares (unknown task types declare nothing)."""
    declared = {*TRIAL_METRICS, *COMPRESSION_METRICS}
    if task_type in TASKS.names():
        declared.update(TASKS.entry(task_type).metrics)
    return sorted(set(names) - declared)


def all_modules() -> list[str]:
    """Every module that implements a registered entry (imported ahead of time by the trial
    processes' fork server, so each trial starts with them loaded)."""
    return sorted(
        {entry.module for r in FAMILIES.values() for entry in r.entries() if entry.module}
    )
