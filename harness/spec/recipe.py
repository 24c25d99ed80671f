"""The typed recipe of one trial: what the planner resolved, as every layer below it reads it.

The planner (`harness.spec.plan.plan_suite`) builds one `TrialRecipe` per trial: its kind, its
model and task sections validated by their registry entries (the entries resolved beside them),
its method's sections (`norm`, `optimizer`, `train`, `prune`, `quantize`) and what the planner
resolved for the trial's device (`precision`, `train.compile`, the optimizer's per-device `auto`
values). Runners, backends, the store and the console read its typed fields; nothing below the
planner reads a trial's configuration out of a dict.

A recipe serialises to the trial's config (`TrialRecipe.config`), the JSON that is stored with
the trial and hashed into its key, and parses back from it once in the trial process
(`load_recipe`) or from a stored row (`stored_recipe`). The config is the one written before the
recipe existed, key for key and in the same order, with its quirks kept so that every stored
trial keeps its key: `threads` only when not `DEFAULT_THREADS`, `ranks` only when more than
one, `train.compile` only when the trial compiles, `train.micro_batch_size` only when set,
`train.parallel` only for several ranks, the optimizer's per-device fields as resolved, the
model section with a method's `model` fields applied.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cached_property
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, TypeAdapter

from harness.lazy_registry import Entry, Registry
from harness.registry import (
    MODELS,
    NORM_PLACEMENTS,
    NORM_TYPES,
    TASKS,
    EvalTaskEntry,
    ModelEntry,
    PretrainedModelEntry,
    TaskEntry,
    TrainableModelEntry,
    TrainTaskEntry,
)
from harness.spec.plugins import installed_plugins
from harness.spec.resolve import resolve_compile, resolve_precision, resolved_optimizer
from harness.spec.schema import DEFAULT_THREADS, TrialSettings
from harness.spec.sections import NormSpec, OptimizerSpec, PruneSpec, QuantizeSpec, TrainSpec

E = TypeVar("E", bound=Entry[Any])
RunPrecision = Literal["fp32", "bf16", "fp16"]
"""A trial's precision once `auto` is resolved for its device."""
RUN_PRECISION: TypeAdapter[RunPrecision] = TypeAdapter(RunPrecision)
SECTIONS = ("norm", "optimizer", "train", "prune", "quantize")
"""The method's sections a recipe holds as validated, as `TrialSettings` has them."""
SETTINGS = [name for name in TrialSettings.model_fields if name not in ("model", "evaluate")]
"""The config's method sections, in the order the config has always had them; `model` is the
resolved model section, not a method's model overrides; `evaluate` is the resolved task section
(`TrialRecipe.evaluation`), not the suite's name of it."""
EVALUATE_KEY = "evaluate"
"""The config key of a fine-tuning trial's lm-eval section, present only when it has one (so
every other trial keeps its key)."""


class TrialKind(StrEnum):
    """What a trial does, decided by its model entry and its post-training sections.

    Runners dispatch on it once (`harness.runner.trial`). A new kind (a pretrained model
    fine-tuned layerwise, a trial spread over several devices) is a new member, its rule in
    `trial_kind`, its capabilities below and its runner beside the others.
    """

    TRAIN = "train"
    """A trainable model trained on a training task, then pruned or quantized if asked."""
    EVALUATE = "evaluate"
    """A pretrained model evaluated as it is."""
    COMPRESS = "compress"
    """A pretrained model pruned and/or quantized, then evaluated."""
    FINETUNE = "finetune"
    """A pretrained model fine-tuned on a training task (an `lm` task in the model's own
    tokenizer) by the method's optimizer and layerwise treatment, evaluated before and after."""

    @property
    def pretrained(self) -> bool:
        """The trial loads a pretrained model (with its tokenizer) instead of building one."""
        return self is not TrialKind.TRAIN

    @property
    def trains(self) -> bool:
        """The trial runs optimizer steps (its optimizer, schedule and layerwise sections run)."""
        return self in (TrialKind.TRAIN, TrialKind.FINETUNE)


def trial_kind(
    model: ModelEntry, task: TaskEntry, prune: PruneSpec | None, quantize: QuantizeSpec | None
) -> TrialKind:
    """The kind of a trial of this model entry, task entry and post-training sections: a
    pretrained model paired with a training task is fine-tuned (`harness.spec.check` refuses
    the pairs that cannot run)."""
    if not isinstance(model, PretrainedModelEntry):
        return TrialKind.TRAIN
    if isinstance(task, TrainTaskEntry):
        return TrialKind.FINETUNE
    return TrialKind.EVALUATE if prune is None and quantize is None else TrialKind.COMPRESS


def parsed_section(registry: Registry[E], section: Mapping[str, Any]) -> tuple[E, BaseModel]:
    """A model or task section's entry (by its `type`) and the section validated by the entry's
    params model, every default filled in."""
    entry = registry.entry(str(section.get("type")))
    if entry.params is None:
        raise TypeError(f"{entry.family} '{entry.name}' declares no schema for its section")
    return entry, entry.params.model_validate(section)


def train_task_section(section: Mapping[str, Any]) -> tuple[TrainTaskEntry, BaseModel]:
    """A training task's section: its entry and the section validated (TypeError for a task
    that evaluates a pretrained model)."""
    entry, params = parsed_section(TASKS, section)
    if not isinstance(entry, TrainTaskEntry):
        raise TypeError(f"task type '{entry.name}' evaluates a pretrained model; it trains none")
    return entry, params


def declared_params(entry: Entry[Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of `fields` that `entry`'s params model declares (all of them are a method's
    extra fields of a section; which belong to which entry is decided by the declarations)."""
    declared = entry.params.model_fields if entry.params is not None else {}
    return {key: value for key, value in fields.items() if key in declared}


@dataclass(frozen=True)
class ModelNorm:
    """A trial's norm settings as a model is built with them: the `norm` section, and its extra
    fields split between the placement's and the norm type's parameters, each validated by its
    entry's params model (defaults filled in), so the model builder validates nothing."""

    spec: NormSpec
    placement_params: dict[str, Any]
    type_params: dict[str, Any]


def model_norm(spec: NormSpec) -> ModelNorm:
    """The norm section with its extra fields validated (ValueError names a field that is a
    parameter of neither the placement nor the norm type; pydantic's error a bad value)."""
    entries = NORM_PLACEMENTS.entry(spec.placement), NORM_TYPES.entry(spec.type)
    extras = spec.model_extra or {}
    known = {name for entry in entries if entry.params for name in entry.params.model_fields}
    if unknown := sorted(set(extras) - known):
        raise ValueError(
            f"norm fields {unknown} are not parameters of placement '{spec.placement}' "
            f"or norm type '{spec.type}'"
        )
    placement, norm_type = (
        entry.params.model_validate(declared_params(entry, extras)).model_dump()
        if entry.params is not None
        else {}
        for entry in entries
    )
    return ModelNorm(spec, placement, norm_type)


@dataclass(frozen=True, kw_only=True)
class TrialRecipe:
    """One trial as the planner resolved it (see the module docstring); build it with
    `TrialRecipe.of`, `TrialRecipe.planned` or `TrialRecipe.from_config`."""

    kind: TrialKind
    model_entry: ModelEntry
    model: BaseModel
    """The model section, validated by `model_entry.params` (a method's overrides applied)."""
    task_entry: TaskEntry
    task: BaseModel
    """The task section, validated by `task_entry.params`."""
    norm: NormSpec
    optimizer: OptimizerSpec
    """With its per-device `auto` values resolved (the entry's `on_device`)."""
    train: TrainSpec
    """With `compile` resolved to a bool."""
    prune: PruneSpec | None
    quantize: QuantizeSpec | None
    precision: RunPrecision
    device: str
    """As the suite says (`auto`, `cpu`, `cuda`, `cuda:N`); the trial process picks the device."""
    threads: int
    """The trial's intra-op torch threads (the suite's `resources.cpus`), on every backend."""
    ranks: int = 1
    """Its processes (torch.distributed world size: the suite's `resources`), which train one
    model together as `train.parallel` says (`harness.runner.distributed`)."""
    seed: int
    plugins: tuple[str, ...]
    time_limit_s: float
    evaluation: tuple[EvalTaskEntry, BaseModel] | None = None
    """The lm-eval task a fine-tuning trial also evaluates before and after (`evaluate`)."""

    def __post_init__(self) -> None:
        if self.evaluation is not None and self.kind is not TrialKind.FINETUNE:
            raise TypeError("only a fine-tuning trial evaluates an lm-eval task besides its own")
        if self.kind is TrialKind.FINETUNE:
            self.finetuned_entries()
        elif self.kind.pretrained:
            self.pretrained_entries()
        else:
            self.trained_entries()

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        """Pickled as its config (a Ray task's argument), parsed back where it is unpickled."""
        return load_recipe, (self.config,)

    @classmethod
    def of(
        cls,
        settings: TrialSettings,
        model: tuple[ModelEntry, BaseModel],
        task: tuple[TaskEntry, BaseModel],
        *,
        seed: int,
        plugins: Iterable[str] = (),
        threads: int = DEFAULT_THREADS,
    ) -> TrialRecipe:
        """The recipe of resolved `settings` (precision, `train.compile` and the optimizer's
        per-device values already resolved: `resolved_settings`) for a model and a task."""
        return cls(
            kind=trial_kind(model[0], task[0], settings.prune, settings.quantize),
            model_entry=model[0],
            model=model[1],
            task_entry=task[0],
            task=task[1],
            **{name: getattr(settings, name) for name in SECTIONS},
            precision=RUN_PRECISION.validate_python(settings.precision),
            device=settings.device,
            threads=threads,
            seed=seed,
            plugins=tuple(plugins),
            time_limit_s=settings.time_limit_s,
        )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> TrialRecipe:
        """The recipe of a trial config (`TrialRecipe.config`); nothing is resolved again. The
        entries it names must be registered (a suite's plugins imported: `load_recipe`)."""
        train = {"compile": False, **config["train"]}  # absent: the trial runs eager
        settings = TrialSettings.model_validate(
            {name: config[name] for name in SETTINGS if name in config} | {"train": train}
        )
        recipe = cls.of(
            settings,
            parsed_section(MODELS, config["model"]),
            parsed_section(TASKS, config["task"]),
            seed=config["seed"],
            plugins=config.get("plugins", ()),
            threads=config.get("threads", DEFAULT_THREADS),
        ).over(config.get("ranks", 1))
        evaluated = config.get(EVALUATE_KEY)
        return recipe.evaluating(parsed_section(TASKS, evaluated) if evaluated else None)

    def evaluating(self, evaluation: tuple[TaskEntry, BaseModel] | None) -> TrialRecipe:
        """This recipe with the task section a method's `evaluate` names (`evaluation`): a
        fine-tuning trial evaluates it before and after; a trial of another kind ignores it
        (a pretrained model paired with an lm-eval task is evaluated as is)."""
        if evaluation is None or self.kind is not TrialKind.FINETUNE:
            return self
        return replace(self, evaluation=evaluation_section(evaluation))

    @cached_property
    def config(self) -> dict[str, Any]:
        """The trial's config: the JSON stored with the trial and hashed into its key (see the
        module docstring for what it keeps as it always was)."""
        sections = {name: dumped(getattr(self, name)) for name in SETTINGS}
        without_single_draw(sections)
        train = self.train.model_dump(mode="json", exclude={"compile", *self.unset_train()})
        sections["train"] = {**train, "compile": True} if self.compile else train
        threads = {} if self.threads == DEFAULT_THREADS else {"threads": self.threads}
        ranks = {"ranks": self.ranks} if self.ranks > 1 else {}
        return {
            **sections,
            "model": dumped(self.model),
            "task": dumped(self.task),
            "seed": self.seed,
            "plugins": list(self.plugins),
            **threads,
            **ranks,
            **({EVALUATE_KEY: dumped(self.evaluation[1])} if self.evaluation else {}),
        }

    def unset_train(self) -> set[str]:
        """The `train` fields left out of the config, so trials without them keep their keys:
        `checkpoint` and `micro_batch_size` when unset, `parallel` for a single process."""
        unset = {
            name for name in ("checkpoint", "micro_batch_size") if getattr(self.train, name) is None
        }
        return unset | ({"parallel"} if self.ranks == 1 else set())

    @property
    def compile(self) -> bool:
        """`torch.compile` the training step (resolved for the trial's device by the planner)."""
        return self.train.compile is True

    @cached_property
    def model_norm(self) -> ModelNorm:
        """The norm settings the model is built with, its parameters validated (`model_norm`)."""
        return model_norm(self.norm)

    def over(self, ranks: int) -> TrialRecipe:
        """This recipe run over `ranks` processes (the suite's `resources`)."""
        return self if ranks == self.ranks else replace(self, ranks=ranks)

    def on_worker(self) -> TrialRecipe:
        """The recipe a cluster worker runs: `cuda:N` read as `cuda`, since the scheduler shows
        the worker only the GPUs it was given."""
        return replace(self, device="cuda") if self.device.startswith("cuda:") else self

    def trained_entries(self) -> tuple[TrainableModelEntry, TrainTaskEntry]:
        """The model and task entries of a `train` trial."""
        model, task = self.model_entry, self.task_entry
        if not isinstance(model, TrainableModelEntry) or not isinstance(task, TrainTaskEntry):
            raise TypeError("a training trial needs a trainable model and a training task")
        return model, task

    def pretrained_entries(self) -> tuple[PretrainedModelEntry, EvalTaskEntry]:
        """The model and task entries of a trial that loads a pretrained model."""
        model, task = self.model_entry, self.task_entry
        if not isinstance(model, PretrainedModelEntry) or not isinstance(task, EvalTaskEntry):
            raise TypeError("an evaluation trial needs a pretrained model and an evaluation task")
        return model, task

    def finetuned_entries(self) -> tuple[PretrainedModelEntry, TrainTaskEntry]:
        """The model and task entries of a `finetune` trial."""
        model, task = self.model_entry, self.task_entry
        if not isinstance(model, PretrainedModelEntry) or not isinstance(task, TrainTaskEntry):
            raise TypeError("a fine-tuning trial needs a pretrained model and a training task")
        return model, task

    def fingerprint(self) -> str:
        """The task's data fingerprint (cheap: it hashes files, it does not tokenize), with the
        evaluated lm-eval task's (`with_evaluation`)."""
        main = self.task_entry.fingerprint(self.task)
        if self.evaluation is None:
            return main
        entry, section = self.evaluation
        return with_evaluation(main, entry.fingerprint(section))


def with_evaluation(task: str, evaluation: str) -> str:
    """The data fingerprint of a fine-tuning trial that also evaluates an lm-eval task: both
    tasks' (a trial without one keeps its task's fingerprint, so its key)."""
    return hashlib.sha256(f"{task}+{evaluation}".encode()).hexdigest()


def evaluation_section(
    evaluation: tuple[TaskEntry, BaseModel] | None,
) -> tuple[EvalTaskEntry, BaseModel] | None:
    """The `evaluate` task's entry and section (TypeError unless it evaluates a pretrained
    model)."""
    if evaluation is None:
        return None
    entry, section = evaluation
    if not isinstance(entry, EvalTaskEntry):
        raise TypeError(
            f"`evaluate` names task type '{entry.name}', which trains; name an lm-eval task"
        )
    return entry, section


def without_single_draw(sections: dict[str, Any]) -> None:
    """Drop `draws: 1` (the default) from the prune and layerwise-quantization sections, so the
    keys of trials stored before `draws` existed still match (`draws` > 1 enters the key)."""
    layerwise = (sections.get("quantize") or {}).get("layerwise") or {}
    for section in (sections.get("prune") or {}, layerwise):
        if section.get("draws") == 1:
            del section["draws"]


def dumped(section: BaseModel | Any) -> Any:
    """A section as the config holds it (JSON values, None as null)."""
    return section.model_dump(mode="json") if isinstance(section, BaseModel) else section


def resolved_settings(settings: TrialSettings, cuda: bool) -> TrialSettings:
    """`settings` resolved for the trial's device (`cuda`: whether `device: auto` finds a GPU):
    its precision, `train.compile`, and the optimizer's per-device `auto` values, so that the
    value that runs is the value in the trial's config (and key)."""
    device = settings.device
    optimizer = resolved_optimizer(settings.optimizer.model_dump(mode="json"), device, cuda)
    compiled = resolve_compile(settings.train.compile, device, cuda)
    return settings.model_copy(
        update={
            "precision": resolve_precision(settings.precision, device, cuda),
            "train": settings.train.model_copy(update={"compile": compiled}),
            "optimizer": OptimizerSpec.model_validate(optimizer),
        }
    )


def load_recipe(config: Mapping[str, Any]) -> TrialRecipe:
    """The recipe a trial process runs: the installed plugins and its suite's plugins imported
    first (they may register the entries it names), then its config parsed
    (`TrialRecipe.from_config`)."""
    installed_plugins()
    for module in config.get("plugins", ()):
        importlib.import_module(module)
    return TrialRecipe.from_config(config)


STORED_ERRORS = (LookupError, ValueError, TypeError)
"""What parsing a stored config may raise here: an entry this process has not registered (a
plugin's), a config of an older schema (pydantic's ValidationError is a ValueError)."""


def stored_recipe(config: Any) -> TrialRecipe | None:
    """The recipe of a stored trial's config, None when it cannot be parsed here (its plugins'
    entries are not registered in this process, or it is of an older schema). A stored row's
    plugins are not imported: a database does not choose what code runs."""
    if not isinstance(config, Mapping):
        return None
    try:
        return TrialRecipe.from_config(config)
    except STORED_ERRORS:
        return None
