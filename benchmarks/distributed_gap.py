"""How far gradient accumulation and a trial over two gloo ranks (DDP, FSDP2) move the loss of
every step from the single process of the same global batch (issue 40; docs/deploy.md
section 5): the tiny suite of `tests/test_distributed.py` (2-layer gpt of width 32, fp32, global
batch 16, 20 steps), on the CPU.

    PYTHONPATH=. .venv/bin/python benchmarks/distributed_gap.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from tests.test_distributed import losses, relative_gap, trial_of

VARIANTS = {
    "`micro_batch_size: 8` (2 x 8) vs batch 16": (" micro_batch_size: 8,", ""),
    "2 gloo ranks, `parallel: ddp`": (" parallel: ddp,", "resources: {tasks: 2}\n"),
    "2 gloo ranks, `parallel: fsdp`": (" parallel: fsdp,", "resources: {tasks: 2}\n"),
}


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        single, _ = losses(trial_of(Path(folder) / "single"))
        print("| trial | largest relative gap over 20 steps |\n|---|---|")
        for index, (name, (train, resources)) in enumerate(VARIANTS.items()):
            series, _ = losses(trial_of(Path(folder) / str(index), train, resources))
            print(f"| {name} | {relative_gap(single, series):.1e} |")


if __name__ == "__main__":
    main()
