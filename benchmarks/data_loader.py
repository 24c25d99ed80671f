"""Prepared datasets at scale: a trial's peak memory on a ~2 GB prepared corpus vs on Shakespeare,
the loader's speed vs what the fastest CPU trial consumes, and `prepare` throughput.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/data_loader.py [--gigabytes 2] [--workers 2]

- The large corpus is Shakespeare's 39 plays repeated (document names `COPY/PLAY`) until its
  byte-level token shards reach `--gigabytes` GB (uint16: 2 bytes a token), prepared with the
  byte tokenizer into a temporary data directory under /tmp (removed at the end; never
  committed).
- Peak RSS: a fresh process runs one trial (`gpt` 4 layers, width 64, 50 steps of 16 x 128
  tokens, an evaluation at the end) and reports its `ru_maxrss`, on the large dataset, on the
  byte-level Shakespeare dataset, and on the built-in `corpus: shakespeare` (tokenized in memory).
- Loader: `LMTask.train_batches` on the large dataset, batches of 16 x 128 and 8 x 1024 tokens
  drawn for 3 s each (tokens/s), against the `tokens_per_s` the fastest trial (1 layer, width
  32, batch 16 x 128) reaches.
- Prepare: Shakespeare (5 MB) with `byte` and `bpe:8192` on `--workers` processes, MB/s and
  tokens/s (BPE: tokenizer training included and also alone).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, resource, sys
from harness.runner.trial import run_trial
result = run_trial(json.loads(sys.argv[1]))
print(json.dumps({
    "status": str(result.status),
    "error": result.error,
    "tokens_per_s": (result.final or {}).get("tokens_per_s"),
    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
}))
"""


def trial_config(task: dict[str, Any], n_layers: int = 4, d_model: int = 64) -> dict[str, Any]:
    from harness.spec.schema import TrialSettings

    settings = {
        "device": "cpu",
        "train": {"steps": 50, "batch_size": 16, "eval_every": 50, "eval_batches": 2},
        "optimizer": {"name": "adamw", "lr": 3e-3},
    }
    dumped = TrialSettings.model_validate(settings).model_dump(mode="json")
    model = {"type": "gpt", "n_layers": n_layers, "d_model": d_model, "n_heads": 4}
    task = {"type": "lm", "seq_len": 128, **task}
    return {**dumped, "seed": 0, "threads": 1, "model": model, "task": task}


def run_child(config: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(config)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    measured: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if "done" not in measured["status"].lower():
        raise RuntimeError(f"trial failed: {measured['error']}")
    return measured


def prepare_timed(
    name: str, documents: list[tuple[str, str]], tokenizer: str, workers: int
) -> dict[str, float]:
    from harness.data.prepare import PrepareRequest, prepare

    started = time.perf_counter()
    index = prepare(PrepareRequest(name, "benchmark", tokenizer, workers=workers), documents)
    seconds = time.perf_counter() - started
    n_bytes = sum(info.bytes for info in index.splits.values())
    n_tokens = sum(info.tokens for info in index.splits.values())
    return {
        "seconds": seconds,
        "mb_per_s": n_bytes / seconds / 1e6,
        "tokens_per_s": n_tokens / seconds,
        "tokens": n_tokens,
        "shard_gb": n_tokens * (2 if index.vocab_size <= 65536 else 4) / 1e9,
    }


def loader_rate(dataset: str, batch_size: int, seq_len: int, seconds: float = 3.0) -> float:
    import torch

    from harness.tasks.catalog import LMTaskSpec
    from harness.tasks.lm import LMTask

    task = LMTask(LMTaskSpec(dataset=dataset, seq_len=seq_len))
    batches = task.train_batches(batch_size, torch.Generator().manual_seed(0))
    n_tokens, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        n_tokens += task.batch_tokens(next(batches))
    return n_tokens / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gigabytes", type=float, default=2.0, help="Size of the large shards.")
    parser.add_argument("--workers", type=int, default=2, help="Tokenizing processes.")
    args = parser.parse_args()

    data = Path(tempfile.mkdtemp(prefix="layerbench-data-bench-", dir="/tmp"))
    os.environ["LAYERBENCH_DATA"] = str(data)
    from harness.tasks.corpora import load_corpus

    plays = load_corpus("shakespeare").documents
    report: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    try:
        report["prepare_byte"] = prepare_timed("shakespeare-bytes", plays, "byte", args.workers)
        report["prepare_bpe"] = prepare_timed("shakespeare-bpe", plays, "bpe:8192", args.workers)
        started = time.perf_counter()
        from harness.data.store import split_documents
        from harness.data.tokenizers import train_bpe

        train = split_documents(plays, 0.1, 0.1, 0)["train"]
        train_bpe([text for _, text in train], 8192)
        report["bpe_training_s"] = time.perf_counter() - started

        play_bytes = sum(len(text.encode()) for _, text in plays)
        copies = max(1, round(args.gigabytes * 1e9 / 2 / play_bytes))
        large = [(f"{copy:05d}/{name}", text) for copy in range(copies) for name, text in plays]
        report["prepare_large"] = prepare_timed("large", large, "byte", args.workers)
        del large

        report["peak_rss_mb"] = {
            "large dataset": run_child(trial_config({"dataset": "large"}))["peak_rss_mb"],
            "shakespeare dataset": run_child(trial_config({"dataset": "shakespeare-bytes"}))[
                "peak_rss_mb"
            ],
            "shakespeare corpus": run_child(trial_config({"corpus": "shakespeare"}))["peak_rss_mb"],
        }
        fastest = run_child(trial_config({"dataset": "large"}, n_layers=1, d_model=32))
        report["fastest_trial_tokens_per_s"] = fastest["tokens_per_s"]
        report["loader_tokens_per_s"] = {
            "16 x 128": loader_rate("large", 16, 128),
            "8 x 1024": loader_rate("large", 8, 1024),
        }
    finally:
        shutil.rmtree(data, ignore_errors=True)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
