"""The registries of LayerBench, one per method family, with lazy entries.

Each family's entry type says what its implementation is (the protocol) and its typed
capabilities; `FAMILY_TABLE` says where each family's name lies in a trial config, its labels,
and which families a pretrained model does not use. The machinery (`Entry`, `Registry`, "did you
mean", lazy imports) is `harness.lazy_registry`. Validating and planning a suite read names and
schemas from the catalogs without importing torch or transformers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import TYPE_CHECKING, Any, Literal

from harness.core import Direction
from harness.lazy_registry import (
    Entry,
    Registry,
)

if TYPE_CHECKING:
    import torch
    from torch import nn

    from harness.methods.placement import Placement
    from harness.methods.pruning import Criterion  # noqa: F401 (named in strings)
    from harness.methods.quantization import Importance, Scheme  # noqa: F401
    from harness.models.pretrained import LoadedModel
    from harness.ranking.aggregates import Standing
    from harness.runner.backend import BackendOptions, Executor
    from harness.spec import Suite
    from harness.spec.recipe import ModelNorm
    from harness.spec.sections import LayerwiseSpec, OptimizerSpec
    from harness.tasks.base import EvalTask, Task
    from harness.tasks.corpora import Corpus, Tokenizer
    from harness.tasks.synthetic import SyntheticKind


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
"""The task section -> a hash of the data it reads (cheap: no tokenizing, no torch)."""
TrivialLevels = Callable[[Any], dict[str, float]]
"""The task section -> the value of each metric a trivial predictor scores (torch-free; see
harness/tasks/trivial.py)."""


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


@dataclass(frozen=True, kw_only=True)
class BackendEntry(Entry["BackendFactory"]):
    """Where a suite's trials run (declared in `harness.runner.catalog`)."""


BackendFactory = Callable[["Suite", "BackendOptions"], "Executor"]
"""(the suite, the command line's backend options) -> the executor that runs its trials."""


@dataclass(frozen=True)
class Metric:
    """A metric: whether lower or higher values are better, what it measures, in what unit
    ("" for a pure number, such as a perplexity)."""

    direction: Direction
    description: str
    unit: str


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
METRICS = Registry("metric", Entry[Metric], ("harness.tasks.catalog", "harness.trial_metrics"))
"""Declared by the tasks that emit them and by harness.trial_metrics (every trial's own, the
compression and the fine-tuning metrics)."""
BACKENDS = Registry("backend", BackendEntry, "harness.runner.catalog")


def declare_metrics(*metrics: tuple[str, Direction, str, str]) -> tuple[str, ...]:
    """Declare each (name, direction, description, unit) in `METRICS`; returns the names, for
    the declaring entry's `metrics=`."""
    for name, direction, description, unit in metrics:
        METRICS.declare(name, Metric(direction, description, unit), summary=description)
    return tuple(name for name, *_ in metrics)


@dataclass(frozen=True)
class Family:
    """One family of registered entries and where the rest of the harness meets it."""

    key: str
    """How trial keys, the version lock and `layerbench methods` name it ("FAMILY:NAME")."""
    registry: Registry[Any]  # Registry[Any]: the table spans every family
    config_path: str | None
    """Where an entry's name lies in a trial's config (None: a trial's config names none)."""
    _: KW_ONLY
    training: bool = False
    """Only a trained model uses it: a pretrained model's trials ignore it (evaluation only)."""
    board: str | None = None
    """The method family the board's filters show for a method that changes the config section
    holding the name (None: the section says nothing about the method)."""
    readme: str | None = None
    """The row of README's "What is built" table that names the built-in entries."""

    @property
    def section(self) -> str | None:
        """The config section the entry's name lies in (`norm` for `norm.type`)."""
        return self.config_path.rpartition(".")[0] if self.config_path else None


FAMILY_TABLE = (
    Family(
        "norm.placement",
        NORM_PLACEMENTS,
        "norm.placement",
        training=True,
        board="normalization",
        readme="norm placement",
    ),
    Family(
        "norm.type",
        NORM_TYPES,
        "norm.type",
        training=True,
        board="normalization",
        readme="norm type",
    ),
    Family(
        "optimizer.name",
        OPTIMIZERS,
        "optimizer.name",
        training=True,
        board="optimizer",
        readme="optimizer",
    ),
    Family(
        "optimizer.layerwise",
        LAYERWISE,
        "optimizer.layerwise.name",
        training=True,
        board="layerwise",
        readme="layerwise optimizer wrapper",
    ),
    Family("train.schedule", SCHEDULES, "train.schedule", training=True, readme="optimizer"),
    Family("prune.criterion", PRUNING, "prune.criterion", board="pruning", readme="layer pruning"),
    Family(
        "quantize.scheme",
        QUANTIZERS,
        "quantize.scheme",
        board="quantization",
        readme="quantization",
    ),
    Family(
        "quantize.layerwise.importance",
        LAYER_IMPORTANCE,
        "quantize.layerwise.importance",
        board="quantization",
        readme="quantization",
    ),
    Family("model.type", MODELS, "model.type", readme="model"),
    Family("task.type", TASKS, "task.type", readme="task"),
    Family("synthetic.kind", SYNTHETIC_KINDS, "task.kind", readme="task"),
    Family("corpus", CORPORA, "task.corpus", readme="task"),
    Family("tokenizer", TOKENIZERS, "task.tokenizer", readme="task"),
    Family("metric", METRICS, None),
)
"""Every family of entries a suite names (backends aside: a run's, not a trial's, choice)."""
FAMILIES: dict[str, Registry[Any]] = {family.key: family.registry for family in FAMILY_TABLE}


def all_modules() -> list[str]:
    """Every module that implements a registered entry (imported ahead of time by the trial
    processes' fork server, so each trial starts with them loaded)."""
    return sorted(
        {entry.module for r in FAMILIES.values() for entry in r.entries() if entry.module}
    )


# Overall ranking statistics (`rank.aggregate`), declared here so a suite names one without
# importing the ranking; their implementations live in `harness.ranking.aggregates`.

AggregateScore = Callable[["Standing"], float | None]
"""A method's standing over all groups -> its score, higher is better (None: undefined, sorted
last)."""


@dataclass(frozen=True, kw_only=True)
class AggregateEntry(Entry[AggregateScore]):
    """An overall statistic that orders the summary. `label` names it in the overall table's
    title; `column` is the key of the overall table's column that shows it (None: the table
    adds a column of its scores); `needs_target` when it reads the time to `rank.target`."""

    label: str
    column: str | None = None
    needs_target: bool = False


AGGREGATES = Registry("overall statistic", AggregateEntry)
for _name, _label, _column, _target, _summary in [
    ("mean_win_rate", "mean win rate", "mean_win_rate", False, "HELM's mean win rate"),
    ("mean_rank", "mean rank", "mean_rank", False, "the mean over groups of the rank"),
    ("normalized", "mean / baseline", "normalized", False, "mean over groups of mean / baseline"),
    ("performance_profile", "profile score (time)", "profile_time", True, "AlgoPerf's score"),
]:
    AGGREGATES.add(
        _name,
        f"harness.ranking.aggregates:{_name}",
        label=_label,
        column=_column,
        needs_target=_target,
        summary=_summary,
    )
