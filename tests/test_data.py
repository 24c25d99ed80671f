"""Prepared datasets (harness/data, `layerbench data`): every source kind round-trips, the split
and fingerprint are deterministic, bad inputs exit 2 with nothing half-written, and `lm` tasks
read prepared datasets (byte-level Shakespeare gives the old loader's tokens; a BPE suite ranks
on bits per byte)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.data.store import data_dir, open_dataset
from harness.data.tokenizers import build_tokenizer
from harness.tasks.catalog import LMTaskSpec
from harness.tasks.lm import LMTask
from tests.factories import ROOT, invoke
from tests.test_tasks import TinyLM

TEXTS = [
    "Ô, café — naïveté! The quick brown fox jumps over the lazy dog.\n" * (20 + i)
    + f"Document {i} ends here.\n"
    for i in range(10)
]


@pytest.fixture(autouse=True)
def data_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "prepared"
    monkeypatch.setenv("LAYERBENCH_DATA", str(folder))
    return folder


def prepare(name: str, source: str | Path, *options: str) -> None:
    done = invoke("data", "prepare", name, "--source", str(source), *options)
    assert done.exit_code == 0, done.output


def fails(*args: str) -> str:
    """The message of a `layerbench` command that must exit 2."""
    done = invoke(*args)
    assert done.exit_code == 2, done.output
    assert "Traceback" not in done.output
    return " ".join(done.output.split())


def text_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "texts"
    (folder / "nested").mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(TEXTS):
        (folder / ("nested" if i % 2 else "") / f"doc{i:02d}.txt").write_text(text)
    return folder


def decoded(name: str) -> dict[str, list[str]]:
    """Each split's documents, decoded from the shards at the document boundaries."""
    dataset = open_dataset(name, verify=True)
    tokenizer = dataset.tokenizer()
    separator = len(tokenizer.encode("\n"))
    documents: dict[str, list[str]] = {}
    for split, tokens in dataset.tokens.items():
        starts = dataset.document_starts(split).tolist()
        ends = [start - separator for start in starts[1:]] + [len(tokens)]
        documents[split] = [
            tokenizer.decode(tokens[a:b]) for a, b in zip(starts, ends, strict=True)
        ]
    return documents


def every_document(documents: dict[str, list[str]]) -> list[str]:
    return sorted(text for split in documents.values() for text in split)


def sources(tmp_path: Path) -> dict[str, Path]:
    """The corpus TEXTS as a JSONL file, a Parquet file and a `save_to_disk` folder."""
    import datasets

    rows = datasets.Dataset.from_dict({"text": TEXTS, "id": list(range(len(TEXTS)))})
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t, "id": i}) + "\n" for i, t in enumerate(TEXTS)))
    parquet = tmp_path / "corpus.parquet"
    rows.to_parquet(str(parquet))
    saved = tmp_path / "saved"
    rows.save_to_disk(str(saved))
    return {"jsonl": jsonl, "parquet": parquet, "saved": saved}


@pytest.mark.parametrize("tokenizer", ["byte", "char", "bpe:300"])
def test_every_source_round_trips_and_splits_by_document(tmp_path: Path, tokenizer: str) -> None:
    kinds = {"folder": text_folder(tmp_path), **sources(tmp_path)}
    for kind, source in kinds.items():
        prepare(kind, source, "--tokenizer", tokenizer, "--val-fraction", "0.2")
        documents = decoded(kind)
        assert every_document(documents) == sorted(TEXTS), kind
        assert [len(documents[s]) for s in ("train", "val", "test")] == [7, 2, 1]
    # documents are named by file and row (corpus:0, ...), so both row files split alike
    assert decoded("jsonl") == decoded("parquet")


def test_a_folder_source_reads_the_files_its_pattern_matches(tmp_path: Path) -> None:
    folder = text_folder(tmp_path)
    for i, text in enumerate(TEXTS):
        (folder / f"module{i}.py").write_text(f"# module {i}\n{text}")
    prepare("code", folder, "--pattern", "*.py")
    assert every_document(decoded("code")) == sorted(
        f"# module {i}\n{t}" for i, t in enumerate(TEXTS)
    )
    prepare("top", folder, "--pattern", "*.txt")
    splits = open_dataset("top").index.splits.values()
    assert sum(split.documents for split in splits) == 5  # doc00, 02, 04, 06, 08: not nested/


def test_the_same_inputs_give_the_same_fingerprint_and_the_seed_moves_the_split(
    tmp_path: Path,
) -> None:
    folder = text_folder(tmp_path)
    prepare("a", folder, "--tokenizer", "bpe:300", "--workers", "2")
    prepare("b", folder, "--tokenizer", "bpe:300")
    prepare("c", folder, "--tokenizer", "bpe:300", "--seed", "1")
    first, second, moved = (open_dataset(name).index for name in "abc")
    assert first.fingerprint == second.fingerprint
    assert first.files == second.files  # the same shards, byte for byte
    assert decoded("a") == decoded("b")
    assert decoded("c")["val"] != decoded("a")["val"]
    assert moved.fingerprint != first.fingerprint
    listing = invoke("data", "list").stdout
    assert all(name in listing for name in "abc") and first.fingerprint[:12] in listing


def test_byte_counts_agree_across_tokenizers(tmp_path: Path) -> None:
    text = "".join(TEXTS)
    for name in ("byte", "char", "bpe:300"):
        tokenizer = build_tokenizer(name, TEXTS, TEXTS)
        assert tokenizer.n_bytes(tokenizer.encode(text)) == len(text.encode("utf-8")), name
    folder = text_folder(tmp_path)
    for name in ("byte", "char", "bpe:300"):
        prepare(name.replace(":", ""), folder, "--tokenizer", name)
    byte_counts = {
        name: {s: (i.bytes, i.documents) for s, i in open_dataset(name).index.splits.items()}
        for name in ("byte", "char", "bpe300")
    }
    assert byte_counts["byte"] == byte_counts["char"] == byte_counts["bpe300"]
    for name in ("char", "bpe300"):
        dataset = open_dataset(name)
        assert int(dataset.byte_lengths[dataset.tokens["val"]].sum()) == (
            dataset.index.splits["val"].bytes
        )


def test_a_packaged_models_tokenizer_prepares_offline(tmp_path: Path) -> None:
    prepare("smol", text_folder(tmp_path), "--tokenizer", "smollm2-135m")
    index = open_dataset("smol").index
    assert index.vocab_size == 49152 and index.dtype == "uint16"
    assert every_document(decoded("smol")) == sorted(TEXTS)


def test_byte_level_shakespeare_gives_the_old_loaders_tokens() -> None:
    prepare("shakespeare-bytes", "shakespeare", "--tokenizer", "byte")
    old = LMTask(LMTaskSpec(seq_len=32))
    new = LMTask(LMTaskSpec(dataset="shakespeare-bytes", seq_len=32))
    for split in ("train", "val", "test"):
        assert np.array_equal(np.asarray(new.tokens[split]), old.tokens[split].numpy())
    assert new.vocab_size == old.vocab_size == 256
    batches = [t.train_batches(4, torch.Generator().manual_seed(3)) for t in (old, new)]
    for _ in range(3):
        (x_old, y_old), (x_new, y_new) = next(batches[0]), next(batches[1])
        assert torch.equal(x_old, x_new) and torch.equal(y_old, y_new)
        assert x_new.dtype == torch.long
    model = TinyLM(256)  # evaluation: the same numbers from the same windows
    assert old.evaluate(model, 4, 2, final=True) == new.evaluate(model, 4, 2, final=True)
    spec = LMTaskSpec(dataset="shakespeare-bytes", seq_len=32)
    assert "corpus" not in spec.model_dump() and "vocab_size" not in spec.model_dump()
    assert LMTask.fingerprint(spec) == open_dataset("shakespeare-bytes").index.fingerprint


def test_the_whole_split_evaluates_every_token(tmp_path: Path) -> None:
    prepare("texts", text_folder(tmp_path), "--tokenizer", "bpe:300")
    windows = LMTask(LMTaskSpec(dataset="texts", seq_len=16))
    whole = LMTask(LMTaskSpec(dataset="texts", seq_len=16, eval={"tokens": "all"}))
    model = TinyLM(whole.vocab_size)
    final = whole.evaluate(model, 4, 1, final=True)
    assert whole.evaluate(model, 4, 1, final=False) == windows.evaluate(model, 4, 1, final=False)
    tokens = torch.from_numpy(np.asarray(whole.tokens["test"], dtype=np.int64))
    with torch.no_grad():
        logits = model(input_ids=tokens[None, :-1]).logits[0]
    nats = torch.nn.functional.cross_entropy(logits, tokens[1:], reduction="sum").item()
    n_bytes = int(whole.data.byte_lengths[tokens[1:].numpy()].sum())
    assert final["test_loss"] == pytest.approx(nats / (len(tokens) - 1), rel=1e-5)
    assert final["test_bits_per_byte"] == pytest.approx(nats / np.log(2) / n_bytes, rel=1e-5)


BPE_SUITE = """\
suite: bpe
seeds: [0, 1]
defaults:
  train: {{steps: 4, batch_size: 4, warmup_steps: 1, eval_every: 4, eval_batches: 1}}
  optimizer: {{name: adamw, lr: 3.0e-3}}
models:
  gpt: {{type: gpt, n_layers: 1, d_model: 16, n_heads: 2, max_seq_len: 32}}
tasks:
  texts: {{type: lm, dataset: {dataset}, seq_len: 16}}
methods:
  pre-ln: {{}}
  post-ln: {{norm: {{placement: post}}}}
baseline: pre-ln
rank:
  metric: bits_per_byte
"""


def test_a_suite_on_a_prepared_bpe_dataset_runs_and_ranks_on_bits_per_byte(
    tmp_path: Path,
) -> None:
    prepare("texts", text_folder(tmp_path), "--tokenizer", "bpe:300")
    suite = tmp_path / "suite.yaml"
    suite.write_text(BPE_SUITE.format(dataset="texts"))
    done = invoke("run", str(suite), "--no-mlflow")
    assert done.exit_code == 0, done.output
    ranked = invoke("rank", str(suite), "--format", "json")
    assert ranked.exit_code == 0, ranked.output
    ranking = json.loads(ranked.stdout)
    assert {row["method"] for row in ranking["rows"]} == {"pre-ln", "post-ln"}
    assert ranking["metric"] == "bits_per_byte"
    assert all(0 < row["mean"] < 20 for row in ranking["rows"] if row["mean"] is not None)


# --- bad inputs: one message, exit 2, nothing half-written -------------------------------------


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def test_bad_sources_and_tokenizers_exit_2_and_write_nothing(
    tmp_path: Path, data_folder: Path
) -> None:
    no_field = tmp_path / "rows.jsonl"
    no_field.write_text('{"body": "some text"}\n' * 5)
    message = fails("data", "prepare", "x", "--source", str(no_field))
    assert "no text field 'text'" in message and "body" in message and "--text-field" in message
    empty = tmp_path / "empty"
    empty.mkdir()
    for i in range(3):
        (empty / f"{i}.txt").write_text("")
    assert "the corpus is empty" in fails("data", "prepare", "x", "--source", str(empty))
    assert "no such file" in fails("data", "prepare", "x", "--source", str(tmp_path / "nope"))
    folder = text_folder(tmp_path)
    assert "unknown tokenizer" in fails(
        "data", "prepare", "x", "--source", str(folder), "--tokenizer", "gpt5"
    )
    assert "bpe:8192" in fails(
        "data", "prepare", "x", "--source", str(folder), "--tokenizer", "bpe:many"
    )
    assert leftovers(data_folder) == []


def test_an_interrupted_prepare_leaves_nothing_that_looks_complete(
    tmp_path: Path, data_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness.data.prepare as preparing

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patched, pytest.raises(KeyboardInterrupt):
        patched.setattr(preparing, "write_index", interrupted)
        preparing.prepare(
            preparing.PrepareRequest("texts", "folder", "byte"),
            [(f"{i}", text) for i, text in enumerate(TEXTS)],
        )
    assert leftovers(data_folder) == []
    prepare("texts", text_folder(tmp_path))
    assert leftovers(data_folder) == ["texts"]


def suite_on(tmp_path: Path, task: str) -> Path:
    suite = tmp_path / "suite.yaml"
    body = BPE_SUITE.format(dataset="texts").replace(
        "texts: {type: lm, dataset: texts, seq_len: 16}", task
    )
    suite.write_text(body)
    return suite


def test_bad_datasets_in_a_suite_exit_2(tmp_path: Path, data_folder: Path) -> None:
    missing = suite_on(tmp_path, "texts: {type: lm, dataset: unknown, seq_len: 16}")
    message = fails("validate", str(missing))
    assert "dataset 'unknown' is not prepared" in message
    assert "run `layerbench data prepare unknown --source SRC --tokenizer TOK`" in message
    prepare("texts", text_folder(tmp_path), "--tokenizer", "bpe:300")
    long = suite_on(tmp_path, "texts: {type: lm, dataset: texts, seq_len: 100000}")
    assert "fewer than seq_len + 1 = 100001" in fails("validate", str(long))
    small = suite_on(tmp_path, "texts: {type: lm, dataset: texts, seq_len: 16, vocab_size: 256}")
    assert "more than vocab_size 256" in fails("validate", str(small))
    both = suite_on(tmp_path, "texts: {type: lm, dataset: texts, tokenizer: char}")
    assert "give either `dataset` or `corpus`" in fails("validate", str(both))
    padded = suite_on(tmp_path, "texts: {type: lm, dataset: texts, seq_len: 16, vocab_size: 320}")
    assert invoke("validate", str(padded)).exit_code == 0

    shard = data_folder / "texts" / "train.bin"
    shard.write_bytes(shard.read_bytes()[:-2])  # a truncated copy
    message = fails("validate", str(padded))
    assert "train.bin is" in message and "truncated" in message
    assert "truncated" in fails("data", "verify", "texts")
    prepare("texts", text_folder(tmp_path), "--tokenizer", "bpe:300")
    raw = bytearray(shard.read_bytes())
    raw[0] ^= 1  # same size, different content
    shard.write_bytes(bytes(raw))
    assert "does not match its checksum" in fails("data", "verify", "texts")
    index = data_folder / "texts" / "index.json"
    index.write_text(index.read_text().replace('"vocab_size": 300', '"vocab_size": 200'))
    assert "does not match its own fingerprint" in fails("validate", str(padded))


# --- hf: datasets from the local Hugging Face cache, offline -----------------------------------


HUB_CACHE = """\
import os, sys
import datasets
from datasets.packaged_modules.parquet.parquet import Parquet

# what `datasets.load_dataset("someone/tiny")` leaves in the cache: the dataset's Arrow files
# and info under HF_DATASETS_CACHE/someone___tiny/default/0.0.0/<commit>/
texts = {texts!r}
datasets.Dataset.from_dict({{"text": texts}}).to_parquet(sys.argv[1])
builder = Parquet(
    data_files={{"train": sys.argv[1]}}, dataset_name="tiny", config_name="default",
    hash="0123456789abcdef0123456789abcdef01234567",
)
builder.download_and_prepare()
root = datasets.config.HF_DATASETS_CACHE
(config,) = [d for d in os.listdir(os.path.join(root, "tiny")) if not d.endswith(".lock")]
os.makedirs(os.path.join(root, "someone___tiny"))
os.rename(os.path.join(root, "tiny", config), os.path.join(root, "someone___tiny", "default"))
"""


def test_an_hf_dataset_prepares_offline_from_the_local_cache(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
    }
    script = textwrap.dedent(HUB_CACHE.format(texts=TEXTS))
    parquet = str(tmp_path / "train.parquet")
    subprocess.run([sys.executable, "-c", script, parquet], env=env, check=True, timeout=300)

    def layerbench(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "harness", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)

    done = layerbench(
        "data", "prepare", "tiny", "--source", "hf:someone/tiny", "--tokenizer", "byte"
    )
    assert done.returncode == 0, done.stderr
    assert every_document(decoded("tiny")) == sorted(TEXTS), done.stderr
    missing = layerbench("data", "prepare", "other", "--source", "hf:someone/other:main:train")
    assert missing.returncode == 2, missing.stderr
    message = " ".join(missing.stderr.split())
    assert "offline (HF_DATASETS_OFFLINE=1) and not in the Hugging Face cache" in message, message
    assert str(tmp_path / "hf" / "datasets") in message, message
    assert "datasets.load_dataset('someone/other', 'main', split='train')" in message, message
    assert "Traceback" not in missing.stderr, message
    assert not (data_dir() / "other").exists()


# --- fingerprints, byte counts, staging, and more bad inputs ----------------------------------


def test_a_hf_tokenizers_datasets_are_fingerprinted_by_its_content_not_its_path(
    tmp_path: Path,
) -> None:
    folder = text_folder(tmp_path)
    trained = build_tokenizer("bpe:300", TEXTS, TEXTS)
    for copy in ("here", "there"):
        (tmp_path / copy).mkdir()
        trained.save(tmp_path / copy)
    prepare("folder", folder, "--tokenizer", str(tmp_path / "here"))
    prepare("file", folder, "--tokenizer", str(tmp_path / "there" / "tokenizer.json"))
    given, elsewhere = (open_dataset(name).index for name in ("folder", "file"))
    assert given.tokenizer == elsewhere.tokenizer == {"kind": "huggingface"}
    assert given.fingerprint == elsewhere.fingerprint


# Fingerprints of TEXTS's folder prepared by the code before the HF tokenizer's path left the
# index: datasets of the other tokenizers, and the keys of their trials, must keep them.
PINNED = {
    "byte": "b2754d290d76a6be2a51fac91ecf6a75674354aa662f85aedd4bc3bf857612fe",
    "char": "38b1aa182c9d22a1168455615b4c78246294ffcae6ab3cfc62e99ff7aba12252",
}


@pytest.mark.parametrize("tokenizer", sorted(PINNED))
def test_byte_and_char_datasets_keep_their_fingerprints(tmp_path: Path, tokenizer: str) -> None:
    prepare(tokenizer, text_folder(tmp_path), "--tokenizer", tokenizer)
    assert open_dataset(tokenizer).index.fingerprint == PINNED[tokenizer]


def test_byte_counts_follow_the_tokenizers_definition_not_its_pieces() -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from harness.data.tokenizers import HFTokenizer

    pieces = ["<unk>", "\u2581the", "\u0120", "\u2581中文", "<0x0A>"]  # "Ġ": a Maltese letter
    backend = Tokenizer(models.Unigram([(p, -float(i)) for i, p in enumerate(pieces)], 0))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    backend.add_special_tokens(["<unk>"])
    sentencepiece = HFTokenizer(backend, {"kind": "huggingface"})
    assert sentencepiece.byte_lengths.tolist() == [0, 4, 2, 7, 1]
    from harness.data.tokenizers import is_byte_level

    assert is_byte_level(build_tokenizer("bpe:300", TEXTS, TEXTS).definition())
    assert not is_byte_level(backend.to_str())


def test_a_prepare_leaves_other_datasets_staging_folders_alone(
    tmp_path: Path, data_folder: Path
) -> None:
    from harness.data.store import staging_folder

    with staging_folder("texts.v2") as other:  # a concurrent prepare of texts.v2
        prepare("texts", text_folder(tmp_path))
        assert other.is_dir()
    assert (data_folder / "texts.v2").is_dir() and (data_folder / "texts" / "index.json").is_file()


def test_a_folder_with_text_and_row_files_asks_which_to_read(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "data.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    (folder / "LICENSE.txt").write_text("Permission is hereby granted.\n")
    message = fails("data", "prepare", "x", "--source", str(folder))
    assert "both text files (LICENSE.txt, ...) and row files (data.jsonl, ...)" in message
    assert "--pattern '**/*.jsonl'" in message
    prepare("rows", folder, "--pattern", "**/*.jsonl")
    assert every_document(decoded("rows")) == sorted(TEXTS)


def test_more_bad_inputs_exit_2_with_one_sentence(
    tmp_path: Path, data_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = text_folder(tmp_path)
    source = ("data", "prepare", "x", "--source", str(folder))
    assert "relative to the source folder" in fails(*source, "--pattern", f"{folder}/*.txt")
    assert "bpe:8192" in fails(*source, "--tokenizer", "bpe:\u00b2")
    nowhere = ("data", "prepare", "x", "--source", str(tmp_path / "nope"))
    assert "dataset name 'x y'" in fails(*nowhere[:2], "x y", *nowhere[3:])
    assert "--val-fraction 1.5" in fails(*nowhere, "--val-fraction", "1.5")
    (folder / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    message = fails(*source)
    assert f"{folder / 'latin1.txt'}: not UTF-8 text" in message
    (folder / "latin1.txt").unlink()
    one = tmp_path / "one.txt"
    one.write_text(TEXTS[0])
    assert "a text file is one document" in fails("data", "prepare", "x", "--source", str(one))
    rows = tmp_path / "two.jsonl"
    rows.write_text('{"text": "a"}\n{"text": "b"}\n')
    assert "each row is one document" in fails("data", "prepare", "x", "--source", str(rows))
    broken = tmp_path / "saved"
    broken.mkdir()
    (broken / "dataset_info.json").write_text("{}")
    assert "cannot be read as a saved dataset" in fails(
        "data", "prepare", "x", "--source", str(broken)
    )
    assert leftovers(data_folder) == []
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("LAYERBENCH_DATA", str(tmp_path / "a-file" / "datasets"))
    message = fails(*source)
    assert "a-file/datasets cannot be written" in message and "LAYERBENCH_DATA" in message
