"""`layerbench data prepare`, `data list` and `data verify`: prepared datasets (harness/data)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    ProgressColumn,
    Task,
    TextColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgress
from rich.text import Text

from harness.cli.common import data_app, fail
from harness.console import console, errors

if TYPE_CHECKING:
    from harness.data.prepare import Progress
    from harness.data.sources import Document

SourceOption = Annotated[
    str,
    typer.Option(
        "--source",
        help="A folder of text files (one document each: the split needs 3); .jsonl/.parquet/"
        ".arrow files or a folder of them (one document per row); a save_to_disk folder "
        "(DIR[:split]); hf:OWNER/NAME[:config][:split]; or a built-in corpus (shakespeare, "
        "file:PATH).",
    ),
]
TokenizerOption = Annotated[
    str,
    typer.Option(
        "--tokenizer",
        help="byte, char, bpe:N (trained on the train split), a packaged model's "
        "(smollm2-135m), or a Hugging Face tokenizer's folder or tokenizer.json.",
    ),
]


@data_app.command("prepare")
def data_prepare(
    name: Annotated[str, typer.Argument(help="The dataset's name (a task's `dataset:`).")],
    source: SourceOption,
    tokenizer: TokenizerOption = "byte",
    val_fraction: Annotated[float, typer.Option(help="Documents held out for validation.")] = 0.1,
    test_fraction: Annotated[float, typer.Option(help="Documents held out for testing.")] = 0.1,
    seed: Annotated[int, typer.Option(help="Seed of the document split.")] = 0,
    workers: Annotated[int, typer.Option(min=1, help="Tokenizing processes.")] = 1,
    text_field: Annotated[str, typer.Option(help="The field holding each row's text.")] = "text",
    pattern: Annotated[
        str | None,
        typer.Option(
            help="The files of a folder source (a glob; **/ for subfolders; default: its .txt "
            "files, else its row files).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Tokenize a corpus once into memory-mapped token shards and an index."""
    from harness.cache import DataMissingError
    from harness.data.prepare import PrepareRequest, check_request, prepare
    from harness.data.store import data_dir

    request = PrepareRequest(name, source, tokenizer, val_fraction, test_fraction, seed, workers)
    try:
        check_request(request)  # before the corpus is read
        documents = read_documents(source, text_field, pattern)
        total = sum(len(text.encode("utf-8")) for _, text in documents)
        with progress_bar(name, total) as advance:
            index = prepare(request, documents, advance)
    except (ValueError, DataMissingError) as error:
        raise fail(str(error)) from None
    except OSError as error:  # a disk that fills up, a file that vanishes while read
        raise fail(f"dataset '{name}': {error}") from None
    tokens = ", ".join(f"{split} {info.tokens:,}" for split, info in index.splits.items())
    console.print(
        f"[green]prepared[/] {name} in {data_dir() / name}: {index.vocab_size:,} ids, "
        f"tokens {tokens}; fingerprint {index.fingerprint[:12]}",
        highlight=False,
    )


def read_documents(source: str, text_field: str, pattern: str | None) -> list[Document]:
    """The documents of `source`: a built-in corpus by its name, else `harness.data.sources`."""
    from pathlib import Path

    from harness.cache import offline_unless_hub_reachable
    from harness.data.sources import Source
    from harness.registry import CORPORA
    from harness.tasks.corpora import load_corpus

    if (source in CORPORA.names() and not Path(source).exists()) or source.startswith("file:"):
        return load_corpus(source).documents
    if source.startswith("hf:"):
        offline_unless_hub_reachable()  # before `datasets` is imported: it reads the variables
    return Source(source, text_field, pattern).documents()


class TokenRate(ProgressColumn):
    """Tokens written so far and tokens per second."""

    def render(self, task: Task) -> Text:
        tokens = int(task.fields.get("tokens", 0))
        elapsed = task.elapsed or 0.0
        rate = tokens / elapsed if elapsed > 0 else 0.0
        return Text(f"{tokens:,} tokens, {rate:,.0f} tokens/s")


@contextmanager
def progress_bar(name: str, total_bytes: int) -> Iterator[Progress]:
    """A progress bar over the corpus's UTF-8 bytes, with tokens/s and the time left."""
    columns = (
        TextColumn(f"tokenizing {name}"),
        BarColumn(),
        DownloadColumn(),
        TokenRate(),
        TimeRemainingColumn(),
    )
    with RichProgress(*columns, console=errors) as bars:
        task = bars.add_task(name, total=total_bytes, tokens=0)
        written = 0

        def advance(n_bytes: int, n_tokens: int) -> None:
            nonlocal written
            written += n_tokens
            bars.update(task, advance=n_bytes, tokens=written)

        yield advance


@data_app.command("list")
def data_list() -> None:
    """The prepared datasets: tokenizer, tokens per split and fingerprint (one line each)."""
    from harness.data.store import SPLITS, DatasetError, data_dir, prepared_names, read_index

    console.print(f"[bold]datasets[/] in {data_dir()}  (set $LAYERBENCH_DATA to move them)")
    for name in prepared_names():
        try:
            index = read_index(name)
        except DatasetError as error:
            errors.print(f"[yellow]damaged:[/] {error}", highlight=False, soft_wrap=True)
            continue
        tokenizer = ":".join(str(value) for value in index.tokenizer.values())
        tokens = " ".join(f"{split} {index.splits[split].tokens:,}" for split in SPLITS)
        line = (
            f"  {name}  tokenizer {tokenizer} ({index.vocab_size:,} ids)  tokens: {tokens}  "
            f"fingerprint {index.fingerprint[:12]}  source {index.source}"
        )
        console.print(line, highlight=False, soft_wrap=True)


@data_app.command("verify")
def data_verify(
    names: Annotated[list[str], typer.Argument(help="Prepared datasets to check.")],
) -> None:
    """Check every file of prepared datasets against the sizes and checksums in their index."""
    from harness.cache import DataMissingError
    from harness.data.store import DatasetError, open_dataset

    for name in names:
        try:
            open_dataset(name, verify=True)
        except (DataMissingError, DatasetError) as error:
            raise fail(str(error)) from None
        console.print(f"[green]ok[/] {name}")
