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
)
"""What every training trial reports besides its task's metrics (`harness.runner.trial`)."""
COMPRESSION_METRICS = declare_metrics(
    ("layers_removed", MAX, "layers removed by pruning", "blocks"),
    ("layers", MIN, "blocks left after pruning", "blocks"),
    ("effective_bits", MIN, "parameter-weighted bits per quantized weight", "bits/weight"),
    ("model_bytes", MIN, "bytes of the model's weights after compression", "bytes"),
)
"""What a pruned or quantized trial reports (`harness.runner.posttrain`)."""
BEFORE = "before_"
"""The prefix of a fine-tuning trial's metrics of the pretrained model before fine-tuning."""
FINETUNE_METRICS = declare_metrics(
    *(
        (f"{BEFORE}{name}", MIN, f"{what} of the pretrained model before fine-tuning", unit)
        for name, what, unit in (
            ("val_loss", "validation loss", "nats/token"),
            ("val_ppl", "validation perplexity", ""),
            ("bits_per_byte", "validation bits per byte", "bits/byte"),
            ("test_loss", "test loss", "nats/token"),
            ("test_ppl", "test perplexity", ""),
            ("test_bits_per_byte", "test bits per byte", "bits/byte"),
        )
    ),
    ("val_loss_gain", MAX, "validation loss before minus after fine-tuning", "nats/token"),
    ("trainable_params", MIN, "parameters that fine-tuning may update", "parameters"),
)
"""What a fine-tuning trial reports besides a training trial's (`harness.runner.finetune`)."""


def undeclared_metrics(task_type: str, names: Iterable[str]) -> list[str]:
    """The metric names a trial of `task_type` stored that neither its task's catalog entry
    (`metrics=`) nor the runner declares (unknown task types declare nothing)."""
    declared = {*TRIAL_METRICS, *COMPRESSION_METRICS, *FINETUNE_METRICS}
    if task_type in TASKS.names():
        declared.update(TASKS.entry(task_type).metrics)
    return sorted(set(names) - declared)
