"""Typed registries, one per method family.

Modelled on lm-evaluation-harness's registry: entries are registered by decorator in their
family's module, the module is imported lazily on first lookup, a name collision is an error,
and an unknown name raises with a "did you mean" suggestion.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel

T = TypeVar("T")


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


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered method, model, task or metric."""

    name: str
    obj: T
    family: str
    doc: str
    params: type[BaseModel] | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class Registry(Generic[T]):
    """Names of one family mapped to their implementations.

    `modules` are imported on first lookup; importing them runs their `@register` decorators.
    """

    def __init__(self, family: str, modules: tuple[str, ...] = ()) -> None:
        self.family = family
        self._modules = modules
        self._entries: dict[str, Entry[T]] = {}
        self._loaded = not modules

    def register(
        self, name: str, *, params: type[BaseModel] | None = None, **meta: Any
    ) -> Callable[[T], T]:
        """Decorator: register `obj` under `name`; `params` is the schema of its suite fields."""

        def decorator(obj: T) -> T:
            self.add(name, obj, params=params, **meta)
            return obj

        return decorator

    def add(
        self,
        name: str,
        obj: T,
        *,
        params: type[BaseModel] | None = None,
        doc: str | None = None,
        **meta: Any,
    ) -> None:
        if name in self._entries:
            raise RegistryError(f"{self.family} '{name}' is already registered")
        lines = (doc or getattr(obj, "__doc__", None) or "").strip().splitlines()
        self._entries[name] = Entry(name, obj, self.family, lines[0] if lines else "", params, meta)

    @property
    def modules(self) -> tuple[str, ...]:
        return self._modules

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            for module in self._modules:
                importlib.import_module(module)

    def entry(self, name: str) -> Entry[T]:
        self._load()
        if name not in self._entries:
            raise UnknownNameError(self.family, name, self.names())
        return self._entries[name]

    def get(self, name: str) -> T:
        return self.entry(name).obj

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def entries(self) -> Iterator[Entry[T]]:
        self._load()
        yield from (self._entries[name] for name in sorted(self._entries))

    def __contains__(self, name: object) -> bool:
        self._load()
        return isinstance(name, str) and name in self._entries


@dataclass(frozen=True)
class Metric:
    """A metric and whether lower or higher values are better."""

    direction: Literal["min", "max"]
    description: str

    def better(self, a: float, b: float) -> bool:
        return a < b if self.direction == "min" else a > b


NORM_PLACEMENTS: Registry[Any] = Registry("norm placement", ("harness.methods.placement",))
NORM_TYPES: Registry[Any] = Registry("norm type", ("harness.methods.norms",))
OPTIMIZERS: Registry[Any] = Registry("optimizer", ("harness.methods.optimizers",))
SCHEDULES: Registry[Any] = Registry("schedule", ("harness.methods.optimizers",))
LAYERWISE: Registry[Any] = Registry("layerwise wrapper", ("harness.methods.layerwise",))
PRUNING: Registry[Any] = Registry("pruning criterion", ("harness.methods.pruning",))
QUANTIZERS: Registry[Any] = Registry("quantization scheme", ("harness.methods.quantization",))
LAYER_IMPORTANCE: Registry[Any] = Registry("layer importance", ("harness.methods.quantization",))
MODELS: Registry[Any] = Registry("model type", ("harness.models.gpt", "harness.models.pretrained"))
TASKS: Registry[Any] = Registry(
    "task type", ("harness.tasks.lm", "harness.tasks.synthetic", "harness.tasks.lmeval")
)
SYNTHETIC_KINDS: Registry[Any] = Registry("synthetic task kind", ("harness.tasks.synthetic",))
CORPORA: Registry[Any] = Registry("corpus", ("harness.tasks.corpora",))
TOKENIZERS: Registry[Any] = Registry("tokenizer", ("harness.tasks.corpora",))
METRICS: Registry[Metric] = Registry("metric")

FAMILIES: dict[str, Registry[Any]] = {
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

for _name, _direction, _description in [
    ("val_loss", "min", "in-distribution validation loss (nats per token)"),
    ("val_ppl", "min", "validation perplexity"),
    ("bits_per_byte", "min", "bits per byte of text (lm: validation; perplexity: its split)"),
    ("test_loss", "min", "held-out test loss (reporting split; at the end of training)"),
    ("test_ppl", "min", "test perplexity at the end of training"),
    ("test_bits_per_byte", "min", "test bits per byte at the end of training"),
    ("train_loss", "min", "training loss (mean over the last logging window)"),
    ("id_loss", "min", "in-distribution loss of a synthetic task"),
    ("ood_loss", "min", "out-of-distribution loss of a synthetic task"),
    ("id_acc", "max", "in-distribution accuracy of a synthetic task"),
    ("acc", "max", "accuracy (lm-eval)"),
    ("acc_norm", "max", "length-normalized accuracy (lm-eval)"),
    ("word_perplexity", "min", "word perplexity (lm-eval)"),
    ("byte_perplexity", "min", "byte perplexity (lm-eval)"),
    ("effective_bits", "min", "parameter-weighted bits per quantized weight"),
    ("model_bytes", "min", "bytes of the model's weights after compression"),
    ("layers_removed", "max", "layers removed by pruning"),
    ("tokens_per_s", "max", "training throughput (tokens per second of train time)"),
    ("params", "min", "number of parameters"),
    ("ood_acc", "max", "out-of-distribution accuracy of a synthetic task"),
    ("test_acc", "max", "held-out test accuracy at the end of training (synthetic: ID test set)"),
    ("val_bits_per_byte", "min", "validation (tuning split) bits per byte of a perplexity task"),
    ("val_acc", "max", "accuracy on the task's validation split (lm-eval, tuning split)"),
    ("val_acc_norm", "max", "length-normalized accuracy on the validation split (lm-eval)"),
    ("val_word_perplexity", "min", "word perplexity on the validation split (lm-eval)"),
    ("val_byte_perplexity", "min", "byte perplexity on the validation split (lm-eval)"),
]:
    METRICS.add(_name, Metric(_direction, _description), doc=_description)  # type: ignore[arg-type]


def all_modules() -> list[str]:
    """Every module that registers entries (imported ahead of time by trial processes)."""
    return sorted({module for registry in FAMILIES.values() for module in registry.modules})
