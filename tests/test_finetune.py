"""Fine-tuning pretrained models (trial kind `finetune`): LISA, LoRA, freezing, the trial itself.

Every model here is a tiny Llama built in the test; SmolLM2 runs only in suites/finetune.yaml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from harness.methods.optimizers import make_optimizer
from harness.methods.param_roles import model_layers
from harness.runner.trial import run_trial
from harness.spec import SuiteError, load_suite
from harness.spec.plan import plan_suite
from harness.spec.recipe import TrialKind
from harness.spec.sections import OptimizerSpec
from tests.factories import byte_bpe_tokenizer, tiny_gpt, tiny_llama, write_choice_task, write_suite

N_LAYERS = 4
TEXT = "To be, or not to be, that is the question. Whether 'tis nobler in the mind to suffer."


def llama() -> nn.Module:
    model: nn.Module = tiny_llama(300, N_LAYERS)
    return model.train()


def optimizer_of(model: nn.Module, layerwise: dict[str, Any]) -> torch.optim.Optimizer:
    spec = OptimizerSpec.model_validate({"name": "adamw", "lr": 1e-2, "layerwise": layerwise})
    return make_optimizer(model, spec)


def step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    ids = torch.randint(0, 300, (2, 16), generator=torch.Generator().manual_seed(0))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def snapshot(params: list[nn.Parameter]) -> list[torch.Tensor]:
    return [p.detach().clone() for p in params]


def changed(before: list[torch.Tensor], params: list[nn.Parameter]) -> bool:
    return any(not torch.equal(b, p) for b, p in zip(before, params, strict=True))


def test_lisa_trains_exactly_the_drawn_blocks_each_period_and_keeps_frozen_state() -> None:
    model = llama()
    layers = model_layers(model)
    optimizer = optimizer_of(model, {"name": "lisa", "active_layers": 2, "interval": 3})
    always = layers.embeddings + layers.head + layers.rest
    periods: list[set[int]] = []
    for index in range(9):
        drawn = {i for i, block in enumerate(layers.blocks) if block[0].requires_grad}
        if index % 3 == 0:
            periods.append(drawn)
            states = {
                id(p): {k: v.clone() for k, v in optimizer.state[p].items()}
                for i, block in enumerate(layers.blocks)
                if i not in drawn
                for p in block
                if p in optimizer.state
            }
        assert drawn == periods[-1] and len(drawn) == 2
        blocks_before = [snapshot(block) for block in layers.blocks]
        always_before = snapshot(always)
        step(model, optimizer)
        updated = {i for i, block in enumerate(layers.blocks) if changed(blocks_before[i], block)}
        assert updated == drawn  # the drawn blocks train, the others are frozen
        assert changed(always_before, always)  # embeddings, head and final norm every step
        for i, block in enumerate(layers.blocks):  # a frozen block's Adam state is kept as is
            for p in block:
                if i not in drawn and id(p) in states:
                    assert all(
                        torch.equal(v, optimizer.state[p][k]) for k, v in states[id(p)].items()
                    )
    assert len(periods) == 3 and len({frozenset(p) for p in periods}) > 1
    resumed = [
        p
        for i, block in enumerate(layers.blocks)
        for p in block
        if i in periods[0] and i in periods[1]
    ]
    assert all(float(optimizer.state[p]["step"]) > 3 for p in resumed)  # state resumes


def test_lora_trains_only_the_adapters_through_peft() -> None:
    model = llama()
    base = [p for p in model.parameters()]
    before = snapshot(base)
    optimizer = optimizer_of(model, {"name": "lora", "r": 4, "alpha": 8})
    adapters = [p for name, p in model.named_parameters() if "lora_" in name]
    assert adapters and all(p.requires_grad for p in adapters)
    assert {name.split(".")[-4] for name, _ in model.named_parameters() if "lora_" in name} == {
        "q_proj",
        "v_proj",
    }  # peft's default targets for Llama
    adapters_before = snapshot(adapters)
    for _ in range(3):
        step(model, optimizer)
    assert not changed(before, base)  # the pretrained weights never move
    assert changed(adapters_before, adapters)
    assert set(map(id, optimizer.state)) <= set(map(id, adapters))


def test_lora_adapts_the_built_in_gpt_by_module_name(tmp_path: Path) -> None:
    """peft knows no architecture for the built-in gpt: LoRA's default is the paper's W_q and
    W_v there, and `all-linear` every Linear of the blocks (not the head, as peft would)."""
    from harness.methods.layerwise import lora_targets

    gpt = tiny_gpt()
    assert lora_targets(gpt, None) == ["q_proj", "v_proj"]
    every = lora_targets(gpt, "all-linear")
    assert "lm_head" not in every and len(every) == 2 * 7  # q k v o, gate up down per block
    optimizer = optimizer_of(gpt, {"name": "lora", "r": 2, "alpha": 4})
    adapted = {name.rsplit(".", 3)[0] for name, _ in gpt.named_parameters() if "lora_" in name}
    assert adapted == {f"blocks.{i}.attn.{m}" for i in (0, 1) for m in ("q_proj", "v_proj")}
    assert set(map(id, optimizer.param_groups[-1]["params"])) == {
        id(p) for name, p in gpt.named_parameters() if "lora_" in name
    }
    with pytest.raises(ValueError, match="lora: Sequential has no q_proj and v_proj modules"):
        lora_targets(nn.Sequential(nn.Linear(2, 2)), None)
    method = "pre-ln: {optimizer: {lr: 0.03, layerwise: {name: lora, r: 2}}}"
    (trial, *_) = plan_suite(load_suite(write_suite(tmp_path, method, steps=4, eval_every=2)))
    result = run_trial(trial.config)  # a gpt trained from scratch: random weights, adapters
    assert result.status == "done", result.error
    assert result.final["val_loss"] < result.series[0].metrics["val_loss"]


def test_freezing_by_role_leaves_the_named_roles_and_blocks_untouched() -> None:
    model = llama()
    layers = model_layers(model)
    optimizer = optimizer_of(model, {"name": "freeze", "roles": ["embeddings"], "blocks": [0, 1]})
    frozen = layers.embeddings + layers.blocks[0] + layers.blocks[1]
    trained = layers.head + layers.blocks[2] + layers.blocks[3]
    frozen_before, trained_before = snapshot(frozen), snapshot(trained)
    step(model, optimizer)
    assert not changed(frozen_before, frozen) and changed(trained_before, trained)


def test_freezing_a_block_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValueError, match=r"freeze: blocks \[9\] do not exist"):
        optimizer_of(llama(), {"name": "freeze", "blocks": [9]})


@pytest.fixture(name="pretrained_dir", scope="module")
def pretrained_dir_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = byte_bpe_tokenizer([TEXT] * 20, 300)
    tiny_llama(len(tokenizer), n_layers=N_LAYERS).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(name="corpus_dir", scope="module")
def corpus_dir_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Twenty short documents: a corpus the tiny model's tokenizer reads in no time."""
    folder = tmp_path_factory.mktemp("corpus")
    for index in range(20):
        (folder / f"doc{index:02d}.txt").write_text(f"{index}. {TEXT}\n" * 8)
    return folder


METHODS = """\
  full: {}
  lisa: {optimizer: {layerwise: {name: lisa, active_layers: 1, interval: 2}}}
  lora: {optimizer: {lr: 1.0e-2, layerwise: {name: lora, r: 4, alpha: 8}}}
  lr-depth: {optimizer: {layerwise: {name: lr_depth, decay: 0.8}}}
"""


def finetune_suite(
    folder: Path, model: Path, task: str = "tokenizer: model", corpus: str = "shakespeare"
) -> Path:
    """A suite fine-tuning the saved tiny Llama with each method for a few steps."""
    path = folder / "finetune.yaml"
    path.write_text(f"""\
suite: finetune-tiny
seeds: [0]
defaults:
  device: cpu
  time_limit_s: 120
  optimizer: {{name: adamw, lr: 3.0e-3}}
  train: {{steps: 6, batch_size: 4, eval_every: 3, eval_batches: 2, log_every: 3}}
models:
  tiny: {{type: pretrained, source: "{model}"}}
tasks:
  text: {{type: lm, corpus: "{corpus}", seq_len: 32, {task}}}
methods:
{METHODS}baseline: full
rank: {{metric: val_loss}}
""")
    return path


def problems(suite: Path) -> str:
    """Every problem `load_suite` finds in `suite`, one a line (it must find some)."""
    with pytest.raises(SuiteError) as caught:
        load_suite(suite)
    return "\n".join(map(str, caught.value.problems))


def test_each_method_fine_tunes_a_pretrained_model_and_stores_before_and_after(
    tmp_path: Path, pretrained_dir: Path, corpus_dir: Path
) -> None:
    suite = finetune_suite(tmp_path, pretrained_dir, corpus=f"file:{corpus_dir}")
    trials = plan_suite(load_suite(suite))
    assert {t.method for t in trials} == {"full", "lisa", "lora", "lr-depth"}
    results = {}
    for trial in trials:
        assert trial.recipe.kind is TrialKind.FINETUNE
        result = run_trial(trial.config)
        assert result.status == "done", result.error
        results[trial.method] = result
    for method, result in results.items():
        final = result.final
        assert {"before_val_loss", "val_loss", "before_bits_per_byte", "bits_per_byte"} <= set(
            final
        )
        assert final["val_loss_gain"] == pytest.approx(final["before_val_loss"] - final["val_loss"])
        assert final["val_loss"] < final["before_val_loss"], method  # a random model learns
        assert result.steps_done == 6 and len(result.series) == 2
        sinks = {(s.step, s.layer) for s in result.layer_stats if s.name == "attention_sink"}
        assert sinks == {(step, layer) for step in (0, 6) for layer in range(N_LAYERS)}, method
    befores = {round(r.final["before_val_loss"], 6) for r in results.values()}
    assert len(befores) == 1  # the same pretrained model, evaluated the same way
    lora, full = results["lora"].final, results["full"].final
    assert lora["trainable_params"] < full["trainable_params"] / 10
    assert full["trainable_params"] == full["params"]


def test_an_lm_task_in_other_tokens_is_refused_for_a_pretrained_model(
    tmp_path: Path, pretrained_dir: Path
) -> None:
    message = problems(finetune_suite(tmp_path, pretrained_dir, task="tokenizer: byte"))
    assert "tasks.text.tokenizer" in message
    assert "fine-tuning pretrained model 'tiny' needs text in its own tokens" in message


def test_the_model_tokenizer_is_refused_for_an_untrained_model(tmp_path: Path) -> None:
    suite = finetune_suite(tmp_path, tmp_path)
    text = suite.read_text().replace(
        f'{{type: pretrained, source: "{tmp_path}"}}', "{type: gpt, n_layers: 2, d_model: 32}"
    )
    text = text.replace("  full: {}", "  full: {}\n  scored: {evaluate: choice}")
    suite.write_text(
        text.replace("  text:", "  choice: {type: lm-eval, task: lb_bigbench_navigate}\n  text:")
    )
    message = problems(suite)
    assert "tokenizer 'model' is a pretrained model's own; 'tiny' is an untrained 'gpt'" in message
    assert "methods.scored.evaluate" in message
    assert "method 'scored' also trains untrained model 'tiny'" in message


def test_a_non_lm_task_or_a_train_only_evaluate_is_refused(
    tmp_path: Path, pretrained_dir: Path
) -> None:
    suite = finetune_suite(tmp_path, pretrained_dir)
    text = suite.read_text().replace(
        "  full: {}", "  full: {}\n  scored: {evaluate: sums}\n  nowhere: {evaluate: missing}"
    )
    suite.write_text(
        text.replace("  text:", "  sums: {type: synthetic, kind: modular-addition}\n  text:")
    )
    message = problems(suite)
    assert "tasks.sums.type" in message
    assert "is fine-tuned on an `lm` task (in its own tokenizer)" in message
    assert "`evaluate` names task 'sums' of type 'synthetic'; name a task of type lm-eval" in (
        message
    )
    assert "`evaluate` names 'missing', which is not a task of this suite" in message


def test_a_dataset_in_other_tokens_is_refused_before_fine_tuning() -> None:
    from harness.runner.finetune import check_dataset_tokenizer
    from harness.tasks.corpora import ByteTokenizer, ModelTokenizer

    model = ModelTokenizer(byte_bpe_tokenizer([TEXT] * 20, 300))
    check_dataset_tokenizer("same", model, model)
    with pytest.raises(
        ValueError, match="task dataset 'bytes' was not tokenized by the fine-tuned"
    ):
        check_dataset_tokenizer("bytes", ByteTokenizer(), model)


def run_methods(suite: Path, methods: str) -> dict[str, Any]:
    """The results of the suite's trials with `methods` as its methods, by method."""
    suite.write_text(suite.read_text().replace(METHODS, methods))
    results = {}
    for trial in plan_suite(load_suite(suite)):
        result = run_trial(trial.config)
        assert result.status == "done", result.error
        results[trial.method] = result
    return results


def test_pruning_then_healing_then_quantizing_compose_in_one_trial(
    tmp_path: Path, pretrained_dir: Path, corpus_dir: Path
) -> None:
    """prune -> fine-tune (heal) -> quantize -> evaluate: the pruned model's loss is stored
    before healing lowers it; the quantized model is the fine-tuned one, LoRA merged."""
    suite = finetune_suite(tmp_path, pretrained_dir, corpus=f"file:{corpus_dir}")
    results = run_methods(
        suite,
        """\
  full: {}
  heal: {prune: {criterion: last_n, n: 2}}
  lora-int4:
    optimizer: {lr: 1.0e-2, layerwise: {name: lora, r: 4}}
    quantize: {scheme: rtn, bits: 4}
""",
    )
    full, heal, quantized = (results[m] for m in ("full", "heal", "lora-int4"))
    assert heal.final["layers_removed"] == 2 and heal.final["layers"] == N_LAYERS - 2
    removed = {s.layer for s in heal.layer_stats if s.name == "removed"}
    assert removed == {2, 3}
    assert heal.final["pruned_val_loss"] != heal.final["before_val_loss"]
    assert heal.final["val_loss"] < heal.final["pruned_val_loss"]  # fine-tuning heals
    assert heal.final["params"] < full.final["params"]
    assert heal.final["effective_bits"] == 32.0  # pruned, stored in fp32
    # a 16-bit scale per row: rows of 32 weights but down_proj's (64); LoRA merged, no adapter
    rows_of_32, rows_of_64 = 32 * 32 * 2 + 16 * 32 * 2 + 64 * 32 * 2, 32 * 64
    expected = (rows_of_32 * (4 + 16 / 32) + rows_of_64 * (4 + 16 / 64)) / (rows_of_32 + rows_of_64)
    assert quantized.final["effective_bits"] == pytest.approx(expected)
    bits = {s.layer: s.value for s in quantized.layer_stats if s.name == "bits"}
    assert bits == dict.fromkeys(range(N_LAYERS), 4.0)
    assert quantized.final["trainable_params"] < full.final["trainable_params"] / 10
    assert "effective_bits" not in full.final and "pruned_val_loss" not in full.final


def test_lora_adapters_merge_into_the_weights_they_adapt() -> None:
    from harness.methods.layerwise import merge_adapters

    model = llama()
    optimizer = optimizer_of(model, {"name": "lora", "r": 4, "alpha": 8})
    for _ in range(2):
        step(model, optimizer)
    ids = torch.randint(0, 300, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        adapted = model(input_ids=ids).logits
        merged = merge_adapters(model)
        assert not any("lora_" in name for name, _ in merged.named_parameters())
        assert torch.allclose(merged(input_ids=ids).logits, adapted, atol=1e-5)


@pytest.mark.slow  # lm-eval's import and two runs of it
def test_an_lm_eval_task_is_evaluated_before_and_after_fine_tuning(
    tmp_path: Path, pretrained_dir: Path, corpus_dir: Path
) -> None:

    from harness.models.pretrained import PretrainedSpec, load_pretrained
    from harness.tasks.corpora import ModelTokenizer
    from harness.tasks.lmeval import LMEvalTask, LMEvalTaskSpec

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    rows = {
        split: [
            {"input": f"{TEXT[: 20 + i]}", "choices": [" to be", " not"], "target": i % 2}
            for i in range(n)
        ]
        for split, n in {"validation": 4, "test": 6}.items()
    }
    write_choice_task(tasks, "lb_ft_choice", rows)
    suite = finetune_suite(tmp_path, pretrained_dir, corpus=f"file:{corpus_dir}")
    text = suite.read_text().replace(
        "  text:",
        f'  choice: {{type: lm-eval, task: lb_ft_choice, include_path: "{tasks}"}}\n  text:',
    )
    text = text.replace("  full: {}", "  full: {}\n  scored: {evaluate: choice}")
    suite.write_text(text + "matrix: [{methods: [full, scored], models: [tiny], tasks: [text]}]\n")
    trials = {t.method: t for t in plan_suite(load_suite(suite)) if t.method in ("full", "scored")}
    assert "evaluate" not in trials["full"].config  # a trial without one keeps its key
    assert trials["scored"].config["evaluate"]["task"] == "lb_ft_choice"
    assert trials["scored"].key != trials["full"].key
    result = run_trial(trials["scored"].config)
    assert result.status == "done", result.error
    final = result.final
    assert {"acc", "before_acc", "val_acc", "before_val_acc", "val_loss", "before_val_loss"} <= set(
        final
    )
    assert final["acc:trivial"] == 0.5 and "before_acc:trivial" not in final
    assert len(result.examples["acc"]) == 6 and len(result.examples["val_acc"]) == 4
    assert sum(result.examples["acc"].values()) / 6 == pytest.approx(final["acc"])
    # before fine-tuning: what the evaluate kind's lm-eval task says of the pretrained model
    loaded = load_pretrained(PretrainedSpec(source=str(pretrained_dir)))
    spec = LMEvalTaskSpec(task="lb_ft_choice", include_path=str(tasks))
    direct = LMEvalTask(spec, ModelTokenizer(loaded.tokenizer)).evaluate(loaded.model, 4)
    assert final["before_acc"] == direct.metrics["acc"]
    assert final["before_val_acc"] == direct.metrics["val_acc"]


def test_a_fine_tune_trial_killed_after_a_checkpoint_resumes_to_identical_numbers(
    tmp_path: Path, pretrained_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fine-tuning checkpoints as training does: LISA (its sampled layers and their optimizer
    state) stopped at step 5 resumes from its step-4 checkpoint to the uninterrupted numbers."""
    from harness.runner.checkpoint_paths import CHECKPOINTS_ENV
    from harness.trial_metrics import MEASURED_METRICS

    monkeypatch.setenv(CHECKPOINTS_ENV, str(tmp_path / "checkpoints"))
    suite = finetune_suite(tmp_path, pretrained_dir)
    text = suite.read_text().replace("log_every: 3}", "log_every: 1, checkpoint: {every: 2}}")
    suite.write_text(text)
    (trial,) = [t for t in plan_suite(load_suite(suite)) if t.method == "lisa"]

    def stop_at_5(step: int, total: int, loss: float) -> None:
        if step == 5:
            raise KeyboardInterrupt

    def comparable(result: Any) -> tuple[Any, ...]:
        final = {k: v for k, v in result.final.items() if k not in MEASURED_METRICS}
        series = [(p.step, p.metrics) for p in result.series]
        return final, series, sorted(map(repr, result.layer_stats))

    whole = run_trial(trial.config)
    with pytest.raises(KeyboardInterrupt):
        run_trial(trial.config, stop_at_5, key=trial.key)
    resumed = run_trial(trial.config, key=trial.key)
    assert resumed.status == "done", resumed.error
    assert resumed.resumes == 1 and resumed.recomputed_steps == 1
    assert comparable(resumed) == comparable(whole)
