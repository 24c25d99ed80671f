"""Which (method, model, task) pairs of a suite can run: a pretrained model is fine-tuned on an
`lm` task in its own tokens or evaluated; an untrained model trains in a tokenizer of its own; a
method does not change a pretrained model's norms, and adds an lm-eval task (`evaluate`) to
fine-tuning trials only."""

from __future__ import annotations

from collections.abc import Iterator

from harness.registry import MODELS, TASKS, EvalTaskEntry, PretrainedModelEntry
from harness.spec.constraints import MODEL_TOKENIZER
from harness.spec.loader import Loc, Locator, Problem
from harness.spec.resolve import ResolveError, matrix_cells, resolve_method
from harness.spec.schema import Suite


def check_combinations(suite: Suite, locator: Locator) -> Iterator[Problem]:
    """Pairs that cannot run: a pretrained model on a task it can be neither fine-tuned on nor
    evaluated by, an untrained model on an evaluation task or in a pretrained model's tokens."""
    reported: set[tuple[str, ...]] = set()
    for method, model, task in matrix_cells(suite):
        if method not in suite.methods or model not in suite.models or task not in suite.tasks:
            continue  # reported by check_references
        model_type, task_type = (
            str(suite.models[model].get("type")),
            str(suite.tasks[task].get("type")),
        )
        if model_type not in MODELS or task_type not in TASKS:
            continue
        pretrained = isinstance(MODELS.entry(model_type), PretrainedModelEntry)
        eval_only = isinstance(TASKS.entry(task_type), EvalTaskEntry)
        if (model, task) not in reported:
            reported.add((model, task))
            if pretrained and not eval_only:
                yield from check_finetuning(suite, model, task, locator)
            elif not pretrained:
                yield from check_untrained(suite, model, task, eval_only, locator)
        if pretrained:
            yield from check_pretrained_method(suite, method, model, locator)
        if not pretrained and evaluates(suite, method):
            yield locator.problem(
                ("methods", method, "evaluate"),
                f"`evaluate` adds an lm-eval task to a fine-tuning trial; method '{method}' also "
                f"trains untrained model '{model}' (pair it with pretrained models in `matrix`)",
            )
    yield from check_evaluated(suite, locator)


def evaluates(suite: Suite, method: str) -> bool:
    """The method (through `defaults` or `extends` too) names an `evaluate` task."""
    try:
        return resolve_method(suite, method)[0].get("evaluate") is not None
    except ResolveError:
        return False  # reported by check_method


def check_evaluated(suite: Suite, locator: Locator) -> Iterator[Problem]:
    """`evaluate` names a task of the suite whose type is `lm-eval`."""
    named: list[tuple[Loc, str | None]] = [(("defaults", "evaluate"), suite.defaults.evaluate)]
    named += [(("methods", name, "evaluate"), m.evaluate) for name, m in suite.methods.items()]
    for loc, task in named:
        if task is None:
            continue
        if task not in suite.tasks:
            yield locator.problem(
                loc, f"`evaluate` names '{task}', which is not a task of this suite"
            )
        elif suite.tasks[task].get("type") != "lm-eval":
            yield locator.problem(
                loc,
                f"`evaluate` names task '{task}' of type '{suite.tasks[task].get('type')}'; "
                "name a task of type lm-eval (a fine-tuning task reports its own held-out loss)",
            )


def check_finetuning(suite: Suite, model: str, task: str, locator: Locator) -> Iterator[Problem]:
    """A pretrained model is fine-tuned on an `lm` task in its own tokens only."""
    section = suite.tasks[task]
    task_type = str(section.get("type"))
    if task_type != "lm":
        yield locator.problem(
            ("tasks", task, "type"),
            f"pretrained model '{model}' is fine-tuned on an `lm` task (in its own tokenizer) or "
            f"evaluated by a perplexity or lm-eval task, not '{task_type}'",
        )
    elif section.get("dataset") is None and section.get("tokenizer") != MODEL_TOKENIZER:
        yield locator.problem(
            ("tasks", task, "tokenizer"),
            f"fine-tuning pretrained model '{model}' needs text in its own tokens: set "
            f"`tokenizer: {MODEL_TOKENIZER}` (or a `dataset` prepared with the model's "
            f"tokenizer), not '{section.get('tokenizer', 'byte')}'",
        )


def check_untrained(
    suite: Suite, model: str, task: str, eval_only: bool, locator: Locator
) -> Iterator[Problem]:
    """An untrained model trains on a training task in a tokenizer of its own."""
    model_type = str(suite.models[model].get("type"))
    if eval_only:
        yield locator.problem(
            ("models", model, "type"),
            f"task '{task}' ({suite.tasks[task].get('type')}) evaluates a pretrained model; "
            f"'{model}' is an untrained '{model_type}'",
        )
    elif suite.tasks[task].get("tokenizer") == MODEL_TOKENIZER:
        yield locator.problem(
            ("tasks", task, "tokenizer"),
            f"tokenizer '{MODEL_TOKENIZER}' is a pretrained model's own; '{model}' is an "
            f"untrained '{model_type}' (name a tokenizer such as byte or char)",
        )


def check_pretrained_method(
    suite: Suite, method: str, model: str, locator: Locator
) -> Iterator[Problem]:
    """A method cannot change a pretrained model's norms (it may prune it before fine-tuning
    and quantize it after: `harness.runner.finetune`)."""
    if "norm" in suite.methods[method].model_fields_set:
        yield locator.problem(
            ("methods", method, "norm"),
            f"`norm` cannot change pretrained model '{model}' (remove it, or pair the method "
            "with a gpt model in `matrix`)",
        )
