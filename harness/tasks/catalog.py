"""The built-in task types and synthetic kinds: each with its section's schema, its data
fingerprint and the "module:attr" of its implementation, imported on first use (see
harness/registry.py). Importing this module imports neither torch nor transformers, so planning
a suite (which needs every trial's key, hence every task's fingerprint) does not either.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveInt,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from harness.cache import DataMissingError
from harness.core import Direction
from harness.registry import SYNTHETIC_KINDS, TASKS, TOKENIZERS, EvalTaskEntry, declare_metrics
from harness.spec.sections import StrictModel
from harness.tasks.corpora import (
    check_corpus_name,
    corpus_fingerprint,
    corpus_vocab_size,
    load_corpus,
    vocab_error,
)
from harness.tasks.trivial import SYNTHETIC_SETS, lm_trivial, synthetic_trivial


def known_corpus(cls: type, corpus: str) -> str:
    """Field validator: the corpus name is registered or a supported scheme."""
    check_corpus_name(corpus)
    return corpus


class LMEvalSpec(StrictModel):
    """How much of the val and test splits an `lm` task's final evaluation reads."""

    tokens: Literal["windows", "all"] = Field(
        "windows",
        description="`windows`: the fixed evaluation windows, as at every evaluation; `all`: "
        "every token of the split at the final evaluation.",
    )


CORPUS_FIELDS = ("corpus", "tokenizer", "val_fraction", "test_fraction", "split_seed")
"""The fields of an `lm` section that read a built-in corpus; a prepared `dataset` fixed them
when it was prepared."""
OPTIONAL_FIELDS = ("dataset", "vocab_size", "eval")
"""Fields left out of the section's stored form when unset, so sections written before they
existed keep their trial keys."""


class LMTaskSpec(StrictModel):
    """A task section of type `lm`: a built-in `corpus` tokenized on load, or a prepared
    `dataset` (`layerbench data prepare`)."""

    type: Literal["lm"] = Field(
        "lm", description="Train and evaluate causal language modelling on a corpus."
    )
    corpus: str = Field(
        "shakespeare", description="A registered corpus (shakespeare), or `file:PATH`."
    )
    tokenizer: str = Field(
        "byte",
        description="A registered tokenizer (byte, char, ...); model: the fine-tuned pretrained "
        "model's own.",
    )
    seq_len: PositiveInt = Field(128, description="Tokens per training and evaluation window.")
    val_fraction: float = Field(
        0.1, gt=0.0, lt=1.0, description="The fraction of the documents in the validation split."
    )
    test_fraction: float = Field(
        0.1, gt=0.0, lt=1.0, description="The fraction of the documents in the test split."
    )
    split_seed: int = Field(
        0, description="The seed of the split by document (the same for every trial seed)."
    )
    dataset: str | None = Field(
        None, description="A prepared dataset's name (`layerbench data list`); replaces corpus."
    )
    vocab_size: PositiveInt | None = Field(
        None,
        description="The model's vocabulary (at least the tokenizer's; larger pads it); "
        "default: the tokenizer's.",
    )
    eval: LMEvalSpec | None = Field(
        None, description="How much of val and test the final evaluation reads."
    )

    _known_corpus = field_validator("corpus")(known_corpus)

    @field_validator("tokenizer")
    @classmethod
    def _known_tokenizer(cls, tokenizer: str) -> str:
        TOKENIZERS.entry(tokenizer)
        return tokenizer

    @model_validator(mode="after")
    def _room_for_train(self) -> LMTaskSpec:
        if self.val_fraction + self.test_fraction >= 1.0:
            raise ValueError("val_fraction + test_fraction must be below 1")
        return self

    @model_validator(mode="after")
    def _dataset_fits(self) -> LMTaskSpec:
        if self.dataset is not None:
            given = [name for name in CORPUS_FIELDS if name in self.model_fields_set]
            if given:
                raise ValueError(
                    f"{', '.join(given)}: a prepared dataset fixed these when it was prepared; "
                    "give either `dataset` or `corpus`"
                )
            check_dataset(self.dataset, self.seq_len, self.vocab_size)
        return self

    @model_validator(mode="after")
    def _corpus_fits(self) -> LMTaskSpec:
        if self.dataset is None and self.vocab_size is not None:
            ids = corpus_vocab_size(self.corpus, self.tokenizer)
            if ids is not None and ids > self.vocab_size:
                source = f"corpus '{self.corpus}' ({self.tokenizer})"
                raise ValueError(vocab_error(source, ids, self.vocab_size))
        return self

    @model_serializer(mode="wrap")
    def _stored_form(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        dumped: dict[str, Any] = handler(self)
        unset = [name for name in OPTIONAL_FIELDS if dumped.get(name) is None]
        unused = CORPUS_FIELDS if self.dataset is not None else ()
        return {k: v for k, v in dumped.items() if k not in (*unset, *unused)}


def check_dataset(name: str, seq_len: int, vocab_size: int | None) -> None:
    """Raise ValueError unless the prepared dataset `name` is intact (file sizes), each split
    holds `seq_len + 1` tokens, and the tokenizer fits in `vocab_size`."""
    from harness.data.store import DatasetError, open_dataset

    try:
        index = open_dataset(name).index
    except (DataMissingError, DatasetError) as error:
        raise ValueError(str(error)) from None
    for split, info in index.splits.items():
        if info.tokens <= seq_len:
            raise ValueError(
                f"the {split} split of dataset '{name}' has {info.tokens} tokens, fewer than "
                f"seq_len + 1 = {seq_len + 1}: lower seq_len or prepare more text"
            )
    if vocab_size is not None and index.vocab_size > vocab_size:
        raise ValueError(
            f"dataset '{name}' has a tokenizer of {index.vocab_size} ids, more than "
            f"vocab_size {vocab_size}: raise vocab_size or prepare it with a smaller tokenizer"
        )


class SyntheticTaskSpec(StrictModel):
    """A task section of type `synthetic`; extra keys are the kind's parameters."""

    model_config = ConfigDict(extra="allow")

    type: Literal["synthetic"] = Field(
        "synthetic",
        description="Data generated on the fly, with in-distribution and out-of-distribution "
        "evaluation sets.",
    )
    kind: str = Field(
        description="A registered synthetic kind (modular-addition, poly-regression); its "
        "parameters are further keys of this section."
    )
    data_seed: int = Field(
        0, description="The seed of the generated data (the same for every trial seed)."
    )
    n_eval: PositiveInt = Field(512, description="Examples in each evaluation set.")

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        SYNTHETIC_KINDS.entry(kind)
        return kind

    @model_validator(mode="after")
    def _valid_kind_params(self) -> SyntheticTaskSpec:
        self.kind_params()
        return self

    def kind_params(self) -> BaseModel:
        """The extra keys validated against the kind's registered parameter schema."""
        schema = SYNTHETIC_KINDS.entry(self.kind).params or StrictModel
        return schema.model_validate(self.model_extra or {})


class ModularAdditionParams(StrictModel):
    modulus: int = Field(97, ge=2, description="p in (a + b) mod p.")
    train_fraction: float = Field(
        0.5, gt=0.0, lt=1.0, description="The fraction of the p^2 pairs trained on."
    )


class PolyRegressionParams(StrictModel):
    n_bins: int = Field(
        64,
        ge=4,
        description="Bins of x over [-1, 1] and of y over f's range: the tokens, and the answer "
        "classes.",
    )
    n_context: int = Field(4, ge=0, description="Example (x, y) pairs shown before the query.")
    max_degree: int = Field(
        4, ge=2, description="The polynomial's degree is drawn from 2..max_degree."
    )


LOCAL_TASKS = Path(__file__).resolve().parents[2] / "suites" / "tasks"
OUTPUTS = "2: per-example outcomes; lm-eval validation split; perplexity val and test windows"
"""What the evaluation-only tasks report, in their fingerprints: bumped when it changes, so
trials stored before the change are not taken for current ones."""


class LMEvalTaskSpec(StrictModel):
    """A task section of type `lm-eval`: one lm-evaluation-harness task."""

    type: Literal["lm-eval"] = Field(
        "lm-eval", description="Evaluate with EleutherAI's lm-evaluation-harness."
    )
    task: str = Field(
        min_length=1,
        description="The lm-eval task: a local one of suites/tasks/ (lb_bigbench_*) or any "
        "installed lm-eval task.",
    )
    limit: PositiveInt | None = Field(
        None, description="Evaluate the first `limit` examples; None: all."
    )
    num_fewshot: NonNegativeInt = Field(0, description="Examples shown before each question.")
    include_path: str | None = Field(
        None, description="A folder of lm-eval task YAMLs; None: suites/tasks/."
    )


class PerplexityTaskSpec(StrictModel):
    """A task section of type `perplexity`: a corpus, the model's tokenizer.

    The val (tuning) and test (reporting) documents are both evaluated, `windows` windows each;
    `split` names the one behind the unprefixed `bits_per_byte`.
    """

    type: Literal["perplexity"] = Field(
        "perplexity",
        description="Evaluation-only perplexity and bits per byte of a (pruned, quantized) "
        "model on a corpus.",
    )
    corpus: str = Field(
        "shakespeare", description="A registered corpus (shakespeare), or `file:PATH`."
    )
    split: Literal["val", "test"] = Field(
        "test", description="The split behind the unprefixed `bits_per_byte`."
    )
    seq_len: PositiveInt = Field(256, description="Tokens per window.")
    windows: PositiveInt = Field(64, description="Windows evaluated in each split.")
    split_seed: int = Field(0, description="The seed of the split by document.")
    val_fraction: float = Field(
        0.1, gt=0.0, lt=1.0, description="The fraction of the documents in the val split."
    )
    test_fraction: float = Field(
        0.1, gt=0.0, lt=1.0, description="The fraction of the documents in the test split."
    )

    _known_corpus = field_validator("corpus")(known_corpus)


def include_path(spec: LMEvalTaskSpec) -> Path:
    return Path(spec.include_path).expanduser() if spec.include_path else LOCAL_TASKS


def files_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
        if path.is_file():
            digest.update(path.relative_to(folder).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def synthetic_fingerprint(spec: SyntheticTaskSpec) -> str:
    """sha256 of the spec and the evaluation sets: the generated data depend on nothing else."""
    identity = {**spec.model_dump(), "eval_sets": SYNTHETIC_SETS}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def lm_eval_fingerprint(spec: LMEvalTaskSpec) -> str:
    """The local task definitions and the data they read (lm-eval's version is in the key)."""
    from harness.tasks.bigbench import data_digest

    digest = files_digest(include_path(spec)) + data_digest() + OUTPUTS
    return hashlib.sha256(digest.encode()).hexdigest()


BIGBENCH_TASKS = "lb_bigbench_"
"""The prefix of the local lm-eval tasks (suites/tasks/) that read an installed BIG-bench task."""


def bigbench_task(spec: LMEvalTaskSpec) -> str | None:
    """The BIG-bench task a local `lb_bigbench_*` task reads; None for any other lm-eval task."""
    name = spec.task.removeprefix(BIGBENCH_TASKS)
    return name if spec.include_path is None and name != spec.task else None


def lm_eval_missing(spec: LMEvalTaskSpec) -> str | None:
    """The install command of the BIG-bench data a local `lb_bigbench_*` task reads, if absent."""
    from harness.tasks.bigbench import INSTALL, task_file

    name = bigbench_task(spec)
    return INSTALL if name is not None and not task_file(name).is_file() else None


def perplexity_fingerprint(spec: PerplexityTaskSpec) -> str:
    """The corpus files' fingerprint and what the task reports (OUTPUTS)."""
    return hashlib.sha256((load_corpus(spec.corpus).fingerprint() + OUTPUTS).encode()).hexdigest()


MIN, MAX = Direction.MIN, Direction.MAX
NATS, BITS, FRACTION, PURE = "nats/token", "bits/byte", "fraction", ""
TASK_METRICS = declare_metrics(
    ("val_loss", MIN, "in-distribution validation loss", NATS),
    ("val_ppl", MIN, "validation perplexity", PURE),
    ("bits_per_byte", MIN, "bits per byte of text (lm: validation; perplexity: its split)", BITS),
    ("test_loss", MIN, "held-out test loss (reporting split; at the end of training)", NATS),
    ("test_ppl", MIN, "test perplexity at the end of training", PURE),
    ("test_bits_per_byte", MIN, "test bits per byte at the end of training", BITS),
    ("id_loss", MIN, "in-distribution loss of a synthetic task", NATS),
    ("ood_loss", MIN, "out-of-distribution loss of a synthetic task", NATS),
    ("id_acc", MAX, "in-distribution accuracy of a synthetic task", FRACTION),
    ("ood_acc", MAX, "out-of-distribution accuracy of a synthetic task", FRACTION),
    (
        "test_acc",
        MAX,
        "held-out test accuracy at the end of training (synthetic: ID test set)",
        FRACTION,
    ),
    ("acc", MAX, "accuracy (lm-eval)", FRACTION),
    ("acc_norm", MAX, "length-normalized accuracy (lm-eval)", FRACTION),
    ("word_perplexity", MIN, "word perplexity (lm-eval)", PURE),
    ("byte_perplexity", MIN, "byte perplexity (lm-eval)", PURE),
    (
        "val_bits_per_byte",
        MIN,
        "validation (tuning split) bits per byte of a perplexity task",
        BITS,
    ),
    ("val_acc", MAX, "accuracy on the task's validation split (lm-eval, tuning split)", FRACTION),
    ("val_acc_norm", MAX, "length-normalized accuracy on the validation split (lm-eval)", FRACTION),
    ("val_word_perplexity", MIN, "word perplexity on the validation split (lm-eval)", PURE),
    ("val_byte_perplexity", MIN, "byte perplexity on the validation split (lm-eval)", PURE),
)
"""Every metric a task emits, declared once: its name, direction, description and unit ("": a
pure number). Each task's entry lists those it emits (`metrics=`); the runner declares the
metrics of every trial (harness/trial_metrics.py)."""
SPLIT_LOSSES = ("loss", "ppl", "bits_per_byte")
LM_EVAL_METRICS = ("acc", "acc_norm", "word_perplexity", "byte_perplexity", "bits_per_byte")

TASKS.declare(
    "lm",
    "harness.tasks.lm:LMTask",
    params=LMTaskSpec,
    fingerprint=corpus_fingerprint,
    metrics=("val_loss", "val_ppl", "bits_per_byte", "test_loss", "test_ppl", "test_bits_per_byte"),
    trivial=lm_trivial,
)
TASKS.declare(
    "synthetic",
    "harness.tasks.synthetic:SyntheticTask",
    params=SyntheticTaskSpec,
    fingerprint=synthetic_fingerprint,
    metrics=("val_loss", "id_loss", "id_acc", "ood_loss", "ood_acc", "test_loss", "test_acc"),
    trivial=synthetic_trivial,
)
TASKS.declare(
    "lm-eval",
    "harness.tasks.lmeval:LMEvalTask",
    kind=EvalTaskEntry,
    params=LMEvalTaskSpec,
    fingerprint=lm_eval_fingerprint,
    metrics=(*LM_EVAL_METRICS, *(f"val_{name}" for name in LM_EVAL_METRICS)),
    missing=lm_eval_missing,
)
TASKS.declare(
    "perplexity",
    "harness.tasks.lmeval:PerplexityTask",
    kind=EvalTaskEntry,
    params=PerplexityTaskSpec,
    fingerprint=perplexity_fingerprint,
    metrics=(
        "bits_per_byte",
        *(f"{split}_{name}" for split in ("val", "test") for name in SPLIT_LOSSES),
    ),
)
SYNTHETIC_KINDS.declare(
    "modular-addition",
    "harness.tasks.synthetic:ModularAddition",
    params=ModularAdditionParams,
    classes=lambda params: params.modulus,
)
SYNTHETIC_KINDS.declare(
    "poly-regression",
    "harness.tasks.synthetic:PolyRegression",
    params=PolyRegressionParams,
    classes=lambda params: params.n_bins,
)
