"""The metrics every trial reports besides its task's (training, compression, fine-tuning), and
which stored metric names nothing declares: the runner reports them and the store checks them,
so they sit below both (see harness/registry.py's `METRICS`). Imports no torch."""

from __future__ import annotations

from collections.abc import Iterable

from harness.core import Direction
from harness.registry import TASKS, declare_metrics

MIN, MAX = Direction.MIN, Direction.MAX

TRIAL_METRICS = declare_metrics(
    ("train_loss", MIN, "training loss (mean over the last logging window)", "nats/token"),
    ("tokens_per_s", MAX, "training throughput (tokens per second of train time)", "tokens/s"),
    ("params", MIN, "number of parameters", "parameters"),
    ("peak_memory_bytes", MIN, "peak device memory (CUDA allocated, else process RSS)", "bytes"),
    ("flops_per_token", MIN, "model training FLOPs per token, 6N + 12 L d T (PaLM)", "FLOPs/token"),
    ("mfu", MAX, "model FLOPs utilization: tokens/s x FLOPs/token / device peak", "fraction"),
    ("devices", MIN, "devices the trial trained on", "devices"),
)
"""What every training trial reports besides its task's metrics (`harness.runner.trial`)."""
COST_METRICS = ("tokens_per_s", "mfu", "peak_memory_bytes", "flops_per_token", "devices")
"""What a training trial cost (`harness.runner.cost`): `layerbench rank --json` and the
leaderboard show them beside each trial."""
MEASURED_METRICS = ("tokens_per_s", "mfu", "peak_memory_bytes")
"""The trial metrics that measure the run, not its result: two runs of a trial store the same
numbers but these (wall-clock speed, memory)."""
COMPRESSION_METRICS = declare_metrics(
    ("layers_removed", MAX, "layers removed by pruning", "blocks"),
    ("layers", MIN, "blocks left after pruning", "blocks"),
    ("effective_bits", MIN, "parameter-weighted bits per quantized weight", "bits/weight"),
    ("model_bytes", MIN, "bytes of the model's weights after compression", "bytes"),
    ("draws", MAX, "random draws of the trained model the metrics are the mean of", "draws"),
)
"""What a pruned or quantized trial reports (`harness.runner.posttrain`)."""
BEFORE = "before_"
"""The prefix of a fine-tuning trial's metrics of the pretrained model before fine-tuning."""
PRUNED = "pruned_"
"""The prefix of a fine-tuning trial's metrics of the pruned model, before fine-tuning heals it."""
LM_TASK_METRICS = (
    ("val_loss", MIN, "validation loss", "nats/token"),
    ("val_ppl", MIN, "validation perplexity", ""),
    ("bits_per_byte", MIN, "validation bits per byte", "bits/byte"),
    ("test_loss", MIN, "test loss", "nats/token"),
    ("test_ppl", MIN, "test perplexity", ""),
    ("test_bits_per_byte", MIN, "test bits per byte", "bits/byte"),
)
"""The fine-tuning (`lm`) task's metrics, stored before and after pruning and fine-tuning."""
LM_EVAL_TASK_METRICS = (
    ("acc", MAX, "lm-eval accuracy", "fraction"),
    ("acc_norm", MAX, "lm-eval length-normalized accuracy", "fraction"),
    ("word_perplexity", MIN, "lm-eval word perplexity", ""),
    ("byte_perplexity", MIN, "lm-eval byte perplexity", ""),
)
"""The metrics of an lm-eval task a fine-tuning trial evaluates before and after (`evaluate`),
on its reporting split and, prefixed `val_`, its validation split."""
FINETUNE_METRICS = declare_metrics(
    *(
        (f"{BEFORE}{name}", direction, f"{what} of the pretrained model before fine-tuning", unit)
        for name, direction, what, unit in (
            *LM_TASK_METRICS,
            *LM_EVAL_TASK_METRICS,
            *(
                (f"val_{name}", d, f"{what} (validation split)", u)
                for name, d, what, u in (
                    *LM_EVAL_TASK_METRICS,
                    ("bits_per_byte", MIN, "lm-eval bits per byte", "bits/byte"),
                )
            ),
        )
    ),
    *(
        (f"{PRUNED}{name}", direction, f"{what} after pruning, before fine-tuning heals", unit)
        for name, direction, what, unit in LM_TASK_METRICS
    ),
    ("val_loss_gain", MAX, "validation loss before minus after fine-tuning", "nats/token"),
    ("trainable_params", MIN, "parameters that fine-tuning may update", "parameters"),
)
"""What a fine-tuning trial reports besides a training trial's (`harness.runner.finetune`)."""


def undeclared_metrics(
    task_type: str, names: Iterable[str], evaluated: Iterable[str] = ()
) -> list[str]:
    """The metric names a trial of `task_type` stored that neither its task's catalog entry
    (`metrics=`), nor that of a task type it also `evaluated` (a fine-tuning trial's lm-eval
    task), nor the runner declares (unknown task types declare nothing)."""
    declared = {*TRIAL_METRICS, *COMPRESSION_METRICS, *FINETUNE_METRICS}
    for name in (task_type, *evaluated):
        if name in TASKS.names():
            declared.update(TASKS.entry(name).metrics)
    return sorted(set(names) - declared)
