"""Tokenizers: text <-> token ids, and the UTF-8 bytes each id stands for (for bits per byte).

A tokenizer is named on the command line (`layerbench data prepare --tokenizer TOK`) as:
- `byte`: UTF-8 bytes, 256 ids;
- `char`: the sorted characters of the whole corpus;
- `bpe:N` (a suite's `bpe: {vocab_size: N}`): byte-level BPE with N ids trained on the
  corpus's train split by the `tokenizers` library, saved with the dataset;
- a packaged pretrained model's name (`smollm2-135m`): its tokenizer, built from the GGUF;
- a folder holding a Hugging Face tokenizer (`tokenizer.json`, or what `AutoTokenizer` reads)
  or a `tokenizer.json` file.

Every tokenizer has an `identity` (what it is, JSON) and a `fingerprint` (sha256 of what
decides its ids), both written into the dataset's index.
"""

from __future__ import annotations

import hashlib
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from harness.cache import PACKAGED, DataMissingError, cache_dir

if TYPE_CHECKING:
    from tokenizers import Tokenizer as RustTokenizer

TOKENIZER_FILE = "tokenizer.json"


class HasDocuments(Protocol):
    """A corpus: its documents as (name, text)."""

    @property
    def documents(self) -> list[tuple[str, str]]: ...


class TokenizerError(ValueError):
    """A tokenizer name that names no tokenizer, or one that cannot be built."""


class Tokenizer(ABC):
    """Text <-> token ids, and how many UTF-8 bytes each id stands for (for bits per byte)."""

    vocab_size: int
    byte_lengths: np.ndarray
    """UTF-8 bytes covered by each token id (shape `(vocab_size,)`)."""

    @abstractmethod
    def encode(self, text: str) -> np.ndarray:
        """Token ids (int64) of `text`."""

    @abstractmethod
    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        """The text of token ids."""

    def n_bytes(self, ids: Sequence[int] | np.ndarray) -> int:
        """UTF-8 bytes of text that the tokens `ids` cover."""
        return int(self.byte_lengths[np.asarray(ids, dtype=np.int64)].sum())

    def identity(self) -> dict[str, Any]:
        """What the tokenizer is, for a dataset's index."""
        return {"kind": type(self).__name__}

    def fingerprint(self) -> str:
        """sha256 of what decides the ids (its kind and its vocabulary or model)."""
        return hashlib.sha256(self.definition().encode()).hexdigest()

    def definition(self) -> str:
        return json.dumps(self.identity(), sort_keys=True)

    def save(self, folder: Path) -> None:
        """Write what `load_saved` needs to rebuild the tokenizer into `folder` (nothing for
        a tokenizer without state)."""
        return


class ByteTokenizer(Tokenizer):
    """UTF-8 bytes: 256 ids, one byte each."""

    vocab_size = 256
    byte_lengths = np.ones(256, dtype=np.int64)

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> ByteTokenizer:
        return cls()

    @classmethod
    def from_corpus(cls, corpus: HasDocuments) -> ByteTokenizer:
        return cls()

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return bytes(np.asarray(ids, dtype=np.uint8).tolist()).decode("utf-8", errors="replace")

    def identity(self) -> dict[str, Any]:
        return {"kind": "byte"}


class CharTokenizer(Tokenizer):
    """Characters: the vocabulary is the sorted set of all the corpus's characters (all splits)."""

    def __init__(self, chars: str) -> None:
        self.chars = "".join(sorted(set(chars)))
        self.vocab_size = len(self.chars)
        self._codes = _code_points(self.chars)
        self.byte_lengths = np.array([len(c.encode("utf-8")) for c in self.chars], dtype=np.int64)

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> CharTokenizer:
        return cls("".join({c for text in texts for c in set(text)}))

    @classmethod
    def from_corpus(cls, corpus: HasDocuments) -> CharTokenizer:
        return cls.from_texts(text for _, text in corpus.documents)

    def encode(self, text: str) -> np.ndarray:
        codes = _code_points(text)
        ids = np.searchsorted(self._codes, codes).clip(max=self.vocab_size - 1)
        unknown = self._codes[ids] != codes
        if unknown.any():
            missing = sorted({chr(c) for c in codes[unknown]})
            raise ValueError(f"characters outside the vocabulary: {missing[:20]!r}")
        return ids.astype(np.int64)

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return "".join(self.chars[i] for i in np.asarray(ids, dtype=np.int64).tolist())

    def identity(self) -> dict[str, Any]:
        return {"kind": "char"}

    def definition(self) -> str:
        return json.dumps({"kind": "char", "chars": self.chars})

    def save(self, folder: Path) -> None:
        (folder / "chars.json").write_text(json.dumps(self.chars))


def _code_points(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


class ModelTokenizer(Tokenizer):
    """A transformers tokenizer; bytes per token from byte-level BPE or SentencePiece."""

    def __init__(self, tokenizer: Any) -> None:
        self.hf = tokenizer
        self.vocab_size = len(tokenizer)
        pieces = tokenizer.convert_ids_to_tokens(list(range(self.vocab_size)))
        byte_level = (
            is_byte_level(tokenizer.backend_tokenizer.to_str())
            if tokenizer.is_fast
            else hasattr(tokenizer, "byte_encoder")  # a slow GPT-2 tokenizer
        )
        self.byte_lengths = vocabulary_bytes(pieces, set(tokenizer.all_special_ids), byte_level)

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self.hf.encode(text, add_special_tokens=False), dtype=np.int64)

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        return str(self.hf.decode(np.asarray(ids, dtype=np.int64).tolist()))


class HFTokenizer(Tokenizer):
    """A `tokenizers` tokenizer (a `tokenizer.json`): trained BPE, a model's, a folder's."""

    def __init__(self, backend: RustTokenizer, identity: dict[str, Any]) -> None:
        self.backend = backend
        self._identity = identity
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        pieces = [backend.id_to_token(i) for i in range(self.vocab_size)]
        special = {i for i, added in backend.get_added_tokens_decoder().items() if added.special}
        self.byte_lengths = vocabulary_bytes(pieces, special, is_byte_level(backend.to_str()))

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self.backend.encode(text, add_special_tokens=False).ids, dtype=np.int64)

    def decode(self, ids: Sequence[int] | np.ndarray) -> str:
        ids_list = np.asarray(ids, dtype=np.int64).tolist()
        return str(self.backend.decode(ids_list, skip_special_tokens=False))

    def identity(self) -> dict[str, Any]:
        return self._identity

    def definition(self) -> str:
        return str(self.backend.to_str())

    def save(self, folder: Path) -> None:
        self.backend.save(str(folder / TOKENIZER_FILE))

    def __getstate__(self) -> dict[str, Any]:
        return {"json": self.backend.to_str(), "identity": self._identity}

    def __setstate__(self, state: dict[str, Any]) -> None:
        from tokenizers import Tokenizer as RustTokenizer

        self.__init__(RustTokenizer.from_str(state["json"]), state["identity"])  # type: ignore[misc]


def is_byte_level(definition: str) -> bool:
    """Whether a `tokenizer.json` (its text) maps bytes to GPT-2's byte-level alphabet: a
    `ByteLevel` pre-tokenizer or decoder, alone or in a `Sequence`."""
    tokenizer = json.loads(definition)
    return any(_has_byte_level(tokenizer.get(part)) for part in ("pre_tokenizer", "decoder"))


def _has_byte_level(component: Any) -> bool:
    if not isinstance(component, dict):
        return False
    steps = component.get("pretokenizers") or component.get("decoders") or []
    return component.get("type") == "ByteLevel" or any(map(_has_byte_level, steps))


def vocabulary_bytes(
    pieces: Sequence[str | None], special: set[int], byte_level: bool
) -> np.ndarray:
    """UTF-8 bytes of each vocabulary piece (0 for special tokens), its pieces written in GPT-2's
    byte-level alphabet or (`byte_level` False) as SentencePiece writes them."""
    return np.array(
        [0 if i in special else piece_bytes(p, byte_level) for i, p in enumerate(pieces)],
        dtype=np.int64,
    )


@cache
def byte_level_chars() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the character that stands for each byte, and its byte."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    table = cast("Callable[[], dict[int, str]]", bytes_to_unicode)()  # untyped in transformers
    return {char: byte for byte, char in table.items()}


SENTENCEPIECE_BYTE = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")


def piece_bytes(piece: str | None, byte_level: bool) -> int:
    """UTF-8 bytes a vocabulary piece stands for (GPT-2 byte-level or SentencePiece)."""
    if piece is None:
        return 0
    if byte_level:
        return sum(1 for char in piece if char in byte_level_chars())
    if SENTENCEPIECE_BYTE.match(piece):
        return 1
    return len(piece.replace("\u2581", " ").encode("utf-8"))


# --- building a tokenizer from its name -------------------------------------------------------


BPE_PREFIX = "bpe:"
BPE_SIZE = re.compile(r"[0-9]+")
"""N of `bpe:N`: ASCII digits only (`str.isdigit` also accepts "²", which `int` refuses)."""


def bpe_vocab_size(name: str) -> int | None:
    """N of `bpe:N`; None for any other name."""
    if not name.startswith(BPE_PREFIX):
        return None
    size = name.removeprefix(BPE_PREFIX)
    if not BPE_SIZE.fullmatch(size) or int(size) < 257:
        raise TokenizerError(
            f"tokenizer '{name}': give the vocabulary size as a whole number of at least 257 "
            "(256 bytes and one merge), e.g. 'bpe:8192'"
        )
    return int(size)


def train_bpe(texts: Iterable[str], vocab_size: int) -> HFTokenizer:
    """Byte-level BPE with `vocab_size` ids trained on `texts` (deterministic for the same texts
    in the same order)."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    backend = RustTokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer=trainer)
    return HFTokenizer(backend, {"kind": "bpe", "vocab_size": vocab_size})


def build_tokenizer(name: str, train_texts: Sequence[str], all_texts: Iterable[str]) -> Tokenizer:
    """The tokenizer `name` (see the module doc); `char` reads `all_texts`, `bpe:N` trains on
    `train_texts`."""
    if name == "byte":
        return ByteTokenizer()
    if name == "char":
        return CharTokenizer.from_texts(all_texts)
    if (size := bpe_vocab_size(name)) is not None:
        return train_bpe(train_texts, size)
    if name in PACKAGED:
        return packaged_model_tokenizer(name)
    path = Path(name).expanduser()
    if path.exists():
        return folder_tokenizer(path)
    raise TokenizerError(
        f"unknown tokenizer '{name}': give byte, char, bpe:N (e.g. bpe:8192), a packaged "
        f"model ({', '.join(PACKAGED)}), or a folder or tokenizer.json of a Hugging Face "
        "tokenizer"
    )


def folder_tokenizer(path: Path) -> HFTokenizer:
    """A Hugging Face tokenizer from a `tokenizer.json` file or a folder transformers reads."""
    from tokenizers import Tokenizer as RustTokenizer

    file = path if path.is_file() else path / TOKENIZER_FILE
    identity = {"kind": "huggingface"}  # not its path: the fingerprint pins its content
    if file.is_file():
        try:
            return HFTokenizer(RustTokenizer.from_file(str(file)), identity)
        except Exception as error:  # the tokenizers library raises bare Exceptions
            raise TokenizerError(f"tokenizer '{path}': not a tokenizer.json ({error})") from None
    from transformers import AutoTokenizer

    try:
        loaded = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as error:
        raise TokenizerError(
            f"tokenizer '{path}': no Hugging Face tokenizer there ({error})"
        ) from None
    if not loaded.is_fast:
        raise TokenizerError(f"tokenizer '{path}': only fast (tokenizer.json) tokenizers work")
    return HFTokenizer(loaded.backend_tokenizer, identity)


def packaged_model_tokenizer(name: str) -> HFTokenizer:
    """A packaged model's tokenizer, extracted from its GGUF once into the cache."""
    from tokenizers import Tokenizer as RustTokenizer

    target = cache_dir() / "tokenizers" / name / TOKENIZER_FILE
    if not target.is_file():
        from transformers import AutoTokenizer

        packaged = PACKAGED[name]
        folder = packaged.package.require(f"tokenizer '{name}'")
        loaded = AutoTokenizer.from_pretrained(folder, gguf_file=packaged.gguf_file)
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.with_suffix(".partial")
        loaded.backend_tokenizer.save(str(staging))
        staging.rename(target)
    return HFTokenizer(RustTokenizer.from_file(str(target)), {"kind": "model", "model": name})


def load_saved(folder: Path, identity: dict[str, Any]) -> Tokenizer:
    """The tokenizer a dataset in `folder` was prepared with (see `Tokenizer.save`)."""
    from tokenizers import Tokenizer as RustTokenizer

    kind = identity["kind"]
    if kind == "byte":
        return ByteTokenizer()
    if kind == "char":
        return CharTokenizer(json.loads((folder / "chars.json").read_text()))
    if not (folder / TOKENIZER_FILE).is_file():
        raise DataMissingError(f"{folder}: {TOKENIZER_FILE} is missing; prepare the data again")
    return HFTokenizer(RustTokenizer.from_file(str(folder / TOKENIZER_FILE)), identity)
