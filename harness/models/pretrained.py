"""Pretrained causal LMs through transformers (SPEC section 3, model type `pretrained`).

`source` is a packaged model name (`smollm2-135m`), a local folder, a `.gguf` file, or a hub id
(loaded by transformers' real loader: works where the hub is reachable or the model is cached).
A GGUF model is dequantized once and cached as safetensors under the LayerBench cache.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from unittest import mock

import torch
from filelock import FileLock

from harness.cache import PACKAGED, DataMissingError, cache_dir
from harness.models.catalog import PretrainedSpec

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass
class LoadedModel:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    load_time_s: float


def converted_dir(name: str) -> Path:
    return cache_dir() / "models" / name


@contextmanager
def gguf_parsed_once() -> Iterator[None]:
    """Within this block gguf parses a file once and builds a tensor-name map once.

    transformers' GGUF loading parses the file three times for one model (for its config, its
    tokenizer and its weights: 6-7 s each for SmolLM2, whose 49,152-token vocabulary gguf's
    reader reads field by field) and builds gguf's tensor-name map anew for each of the
    model's 397 modules (10 s). It imports both names from `gguf` where it calls them, so
    cached versions in their place serve the three loads; both results are only read."""
    import gguf

    with (
        mock.patch.object(gguf, "GGUFReader", functools.cache(gguf.GGUFReader)),
        mock.patch.object(gguf, "get_tensor_name_map", functools.cache(gguf.get_tensor_name_map)),
    ):
        yield


def gguf_to_safetensors(folder: Path, gguf_file: str, target: Path) -> None:
    """Dequantize a GGUF model and save it as safetensors in `target` (reloads in about a
    second)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
        dequantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file)
    config = dequantized.config
    del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(dequantized.state_dict())
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)


def convert_once(target: Path, convert: Callable[[Path], None]) -> Path:
    """`target`, written by `convert(folder)` unless it is there: once, however many trial
    processes ask at the same time (a file lock; the first converts, the others wait and reuse
    it), into a folder of this process's own that is renamed into place when complete."""
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(target.with_name(target.name + ".lock")):
        if (target / "config.json").exists():
            return target
        shutil.rmtree(target, ignore_errors=True)  # an incomplete folder of an older version
        staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
        try:
            convert(staging)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def resolve_source(source: str) -> Path | str:
    """A loadable folder for `source`, converting a packaged or GGUF model on first use."""
    if source in PACKAGED:
        packaged = PACKAGED[source]
        return convert_once(
            converted_dir(source),
            lambda target: gguf_to_safetensors(
                packaged.package.require(f"model '{source}'"), packaged.gguf_file, target
            ),
        )
    path = Path(source).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise DataMissingError(f"model '{source}': no such GGUF file")
        return convert_once(
            converted_dir(f"gguf-{path.stem}"),
            lambda target: gguf_to_safetensors(path.parent, path.name, target),
        )
    if path.exists():
        return path
    return source


def load_pretrained(spec: PretrainedSpec) -> LoadedModel:
    """The model (eval mode) and its tokenizer; transformers' model stack is imported here, not
    with this module (the trial processes' fork server imports every registered module)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    import harness.models.gpt_hf  # noqa: F401 (registers a saved built-in gpt with the Auto classes)

    started = time.perf_counter()
    location = resolve_source(spec.source)
    dtype = torch.bfloat16 if spec.dtype == "bf16" else torch.float32
    try:
        AutoConfig.from_pretrained(location, revision=spec.revision)
    except OSError as error:
        raise DataMissingError(
            f"model '{spec.source}' is neither a packaged model ({', '.join(PACKAGED)}), "
            f"a local folder, a .gguf file, nor a hub id reachable from here: {error}"
        ) from None
    model = AutoModelForCausalLM.from_pretrained(location, revision=spec.revision, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(location, revision=spec.revision)
    return LoadedModel(model.eval(), tokenizer, time.perf_counter() - started)
