"""Where a corpus's documents come from (`layerbench data prepare --source SRC`).

- a folder of text files: the files its `pattern` matches (`**/*.txt`: every `.txt` file, in
  subfolders too), sorted by path, one document each (a single text file is one document, too
  few for the split by document, which needs 3);
- `.jsonl` / `.json`, `.parquet` or `.arrow` files, or a folder of them: one document per row,
  its text in a field (`text` unless `--text-field` says otherwise), read by `datasets`;
- a folder holding both `.txt` and row files is read only with a `pattern` that says which
  (every matched file is read by its suffix: rows from a row file, one document from any other);
- a folder written by `datasets.Dataset.save_to_disk` (or a `DatasetDict`'s, with its `train`
  split unless the folder names one: `DIR:split`);
- `hf:OWNER/NAME[:config][:split]`: a Hugging Face dataset through `datasets.load_dataset`,
  from the local Hugging Face cache when offline (`HF_DATASETS_OFFLINE=1`).

A document is (name, text); names are unique within a corpus (the split hashes them).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.cache import DataMissingError

Document = tuple[str, str]
"""A document: (name, text)."""

ROW_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".arrow": "arrow"}
"""File suffixes read row by row, and the `datasets` builder that reads each."""
TEXT_PATTERN = "**/*.txt"
"""The files a folder source reads without a pattern (when it holds no row files)."""
SAVED_DATASET_MARKERS = ("dataset_info.json", "dataset_dict.json", "state.json")


class SourceError(ValueError):
    """A source that does not exist, has no text field, or holds no text."""


@dataclass(frozen=True)
class Source:
    """A corpus source as given (`spec`) and the field that holds each row's text."""

    spec: str
    text_field: str = "text"
    pattern: str | None = None
    """The files of a folder source (a glob relative to it: `**/` matches subfolders); None:
    its `.txt` files, else its row files (an error when it holds both)."""

    def documents(self) -> list[Document]:
        """Every document of the source, in the source's order."""
        if self.spec.startswith("hf:"):
            return self._rows(hub_dataset(self.spec), "")
        path, split = saved_dataset_path(self.spec)
        if path is not None:
            return self._rows(saved_dataset(path, split), "")
        path = Path(self.spec).expanduser()
        if not path.exists():
            raise SourceError(f"source '{self.spec}': no such file or folder")
        documents: list[Document] = []
        for name, file in named_files(path, [path] if path.is_file() else self._files(path)):
            if file.suffix in ROW_FORMATS:
                documents += self._rows(row_file(file), f"{name}:")
            else:
                documents.append((name, read_text(file)))
        return documents

    def _files(self, folder: Path) -> list[Path]:
        """The files of a folder source (see `pattern`)."""
        if self.pattern is not None:
            if not (files := matching_files(folder, self.pattern)):
                raise SourceError(
                    f"source '{self.spec}': no file matches --pattern '{self.pattern}'"
                )
            return files
        texts = matching_files(folder, TEXT_PATTERN)
        rows = [f for f in matching_files(folder, "**/*") if f.suffix in ROW_FORMATS]
        if texts and rows:
            raise SourceError(
                f"source '{self.spec}' holds both text files ({texts[0].name}, ...) and row files "
                f"({rows[0].name}, ...): say which to read with --pattern, e.g. --pattern "
                f"'**/*{rows[0].suffix}' or --pattern '{TEXT_PATTERN}'"
            )
        if not texts and not rows:
            raise SourceError(
                f"source '{self.spec}': no .txt, .jsonl, .json, .parquet or .arrow files"
            )
        return texts or rows

    def _rows(self, rows: Any, prefix: str) -> list[Document]:
        """The `text_field` of each row of a `datasets.Dataset`, named `{prefix}{row}`."""
        if self.text_field not in rows.column_names:
            raise SourceError(
                f"source '{self.spec}': no text field '{self.text_field}' "
                f"(its fields: {', '.join(rows.column_names)}); name one with --text-field"
            )
        texts = rows[self.text_field]
        return [(f"{prefix}{i}", str(text)) for i, text in enumerate(texts) if text is not None]


def named_files(root: Path, files: list[Path]) -> list[tuple[str, Path]]:
    """Each file with its name relative to `root` (its stem for a single file)."""
    if root.is_file():
        return [(root.stem, root)]
    return [(file.relative_to(root).with_suffix("").as_posix(), file) for file in files]


def matching_files(folder: Path, pattern: str) -> list[Path]:
    """The files under `folder` that the glob `pattern` matches, sorted by path."""
    try:
        return [path for path in sorted(folder.glob(pattern)) if path.is_file()]
    except (NotImplementedError, ValueError):  # an absolute or empty pattern
        raise SourceError(
            f"--pattern '{pattern}': give a glob relative to the source folder, e.g. "
            f"'{TEXT_PATTERN}'"
        ) from None


def read_text(file: Path) -> str:
    """A text file's text (UTF-8)."""
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise SourceError(
            f"source {not_utf8(file, error)}, or leave it out with --pattern"
        ) from None


def not_utf8(file: Path, error: UnicodeDecodeError) -> str:
    """What is wrong with a text file that is not UTF-8, and what to do."""
    return (
        f"file {file}: not UTF-8 text ({error.reason} at byte {error.start}); convert it to UTF-8"
    )


def split_hint(spec: str) -> str:
    """What gives more documents, for the kind of source `spec` names."""
    path = Path(spec).expanduser()
    if spec.startswith("hf:") or path.suffix in ROW_FORMATS or saved_dataset_path(spec)[0]:
        return "each row is one document: give a source with more rows"
    if path.is_file() or spec.startswith("file:"):
        return "a text file is one document: give a folder of text files"
    return "each text file, or row of a row file, is one document: give a folder with more"


def row_file(file: Path) -> Any:
    """A JSONL, Parquet or Arrow file as a `datasets.Dataset` (kept in memory, not cached)."""
    import datasets

    builder = ROW_FORMATS[file.suffix]
    try:
        return datasets.load_dataset(
            builder, data_files=str(file), split="train", keep_in_memory=True
        )
    except Exception as error:  # datasets raises many kinds for a malformed file
        raise SourceError(f"source file {file}: cannot be read as {builder} ({error})") from None


def saved_dataset_path(spec: str) -> tuple[Path | None, str | None]:
    """The folder and split of a `save_to_disk` source (`DIR` or `DIR:split`), or None."""
    folder, _, split = spec.rpartition(":") if ":" in spec else (spec, "", "")
    path = Path(folder).expanduser()
    if path.is_dir() and any((path / marker).is_file() for marker in SAVED_DATASET_MARKERS):
        return path, split or None
    path = Path(spec).expanduser()
    if path.is_dir() and any((path / marker).is_file() for marker in SAVED_DATASET_MARKERS):
        return path, None
    return None, None


def saved_dataset(path: Path, split: str | None) -> Any:
    """A dataset written by `save_to_disk`; a `DatasetDict`'s `split` (default `train`)."""
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except (OSError, ValueError) as error:  # missing or damaged files of the saved dataset
        raise SourceError(f"source '{path}': cannot be read as a saved dataset ({error})") from None
    if not isinstance(loaded, datasets.DatasetDict):
        return loaded
    chosen = split or "train"
    if chosen not in loaded:
        raise SourceError(
            f"source '{path}': no split '{chosen}' (its splits: {', '.join(loaded)}); "
            f"name one as '{path}:SPLIT'"
        )
    return loaded[chosen]


def parse_hub_spec(spec: str) -> tuple[str, str | None, str]:
    """(OWNER/NAME, config or None, split) of `hf:OWNER/NAME[:config][:split]`."""
    parts = spec.removeprefix("hf:").split(":")
    if not parts[0] or len(parts) > 3:
        raise SourceError(f"source '{spec}': write it as hf:OWNER/NAME[:config][:split]")
    name, config, split = [*parts, "", ""][:3]
    return name, config or None, split or "train"


def hub_dataset(spec: str) -> Any:
    """A Hugging Face dataset's split, from the hub or (offline) the local cache."""
    import datasets

    name, config, split = parse_hub_spec(spec)
    try:
        return datasets.load_dataset(name, config, split=split)
    except (FileNotFoundError, ConnectionError, datasets.exceptions.DatasetNotFoundError) as e:
        raise DataMissingError(hub_missing(name, config, split, e)) from None
    except ValueError as error:  # an unknown config or split
        raise SourceError(f"source '{spec}': {error}") from None


def hub_missing(name: str, config: str | None, split: str, error: Exception) -> str:
    """What to download, and where, for a dataset that is not in the local cache."""
    import datasets

    offline = os.environ.get("HF_DATASETS_OFFLINE") or os.environ.get("HF_HUB_OFFLINE")
    why = "offline (HF_DATASETS_OFFLINE=1) and not" if offline else "not reachable and not"
    arguments = ", ".join(repr(a) for a in (name, config) if a) + f", split={split!r}"
    return (
        f"source 'hf:{name}': {why} in the Hugging Face cache {datasets.config.HF_DATASETS_CACHE}"
        f" ({type(error).__name__}); download it on a machine with network access into that "
        f'cache (same HF_HOME): python -c "import datasets; '
        f'datasets.load_dataset({arguments})"'
    )


def iter_chunks(documents: list[Document], max_chars: int) -> Iterator[list[Document]]:
    """Consecutive runs of documents of about `max_chars` characters each (for the workers)."""
    chunk: list[Document] = []
    size = 0
    for document in documents:
        chunk.append(document)
        size += len(document[1])
        if size >= max_chars:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk
