"""The prepared GPU check (issue 40): what to run, in under 10 minutes, when a GPU machine is lent.

    .venv/bin/python -m benchmarks.gpu_check --out gpu_check      # on a machine with CUDA GPUs
    .venv/bin/python -m benchmarks.gpu_check --dry-run --out DIR  # anywhere: CPU, tiny, seconds

Each step runs a suite with `layerbench run --no-mlflow` into a fresh SQLite database and reads
back what the trials stored:

1. **bf16**: the suite of `benchmarks/gpu_bf16.py` (a 6-layer, width-384 `gpt`, sequence 256,
   batch 64, Pre-LN vs Post-LN, `device: cuda`, `precision: bf16`), one seed: each trial's
   tokens/s, MFU (against the device's datasheet peak, `harness.runner.cost`), peak memory and
   device, as stored.
2. **ddp**: the same model in fp32, 20 steps, once on one GPU and once with `train.parallel: ddp`
   on 2 GPUs (`resources.gpus: 2`), same global batch; skipped with a message when this
   LayerBench has no `train.parallel` (issue 40 items 1-2 not merged) or fewer than 2 GPUs.
3. **equality**: the two trials' loss series agree to `DDP_TOLERANCE` relative (fp32 on GPUs:
   reduction order differs between one process and an all-reduce).
4. **placement**: 4 trials with `--workers 2`: each sees one GPU (`CUDA_VISIBLE_DEVICES`, in its
   stored environment), and no two trials that ran at the same time saw the same GPU.

It writes `gpu_check.json` (every figure) and `gpu_check.md` (a short summary) into `--out`, and
exits 1 when a step failed. `--dry-run` runs the same steps on the CPU with a tiny model and a
fake pair of GPUs for the placement (`CUDA_VISIBLE_DEVICES=0,1`, trials on the CPU): it checks the
script, not the GPUs (tests/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from itertools import combinations
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from benchmarks import gpu_bf16
from harness.spec.sections import TrainSpec
from harness.store.db import make_engine
from harness.store.models import MetricPoint, Result, Trial

DDP_TOLERANCE = 1e-4
TINY_MODEL = {"type": "gpt", "n_layers": 2, "d_model": 32, "n_heads": 2, "max_seq_len": 32}
TINY_TASK = {"type": "lm", "corpus": "shakespeare", "tokenizer": "byte", "seq_len": 32}
COSTS = ("tokens_per_s", "mfu", "peak_memory_bytes", "flops_per_token")
Step = dict[str, Any]


def gpus() -> list[str]:
    """The names of this machine's CUDA GPUs (none without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())]


def base_suite(name: str, dry_run: bool, steps: int) -> dict[str, Any]:
    """The bf16 suite of benchmarks/gpu_bf16.py, one seed; tiny and on the CPU for a dry run."""
    suite = gpu_bf16.suite(steps)
    suite["suite"], suite["seeds"] = name, [0]
    if dry_run:
        suite["defaults"]["device"] = "cpu"
        suite["defaults"]["train"] |= {"batch_size": 8, "eval_batches": 1}
        suite["models"] = {"gpt-6l-384": TINY_MODEL}
        suite["tasks"] = {"shakespeare": TINY_TASK}
    return suite


def run_suite(
    suite: dict[str, Any], folder: Path, workers: int = 1, env: dict[str, str] | None = None
) -> tuple[list[dict[str, Any]], str]:
    """`layerbench run` of `suite` in `folder`; its stored trials and the command's output."""
    folder.mkdir(parents=True, exist_ok=True)
    path, url = folder / "suite.yaml", f"sqlite:///{folder / 'results.db'}"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    command = [sys.executable, "-m", "harness", "run", str(path), "--db", url, "--no-mlflow"]
    done = subprocess.run(
        [*command, "--workers", str(workers)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
        timeout=540,
    )
    output = (done.stdout + done.stderr)[-2000:]
    return (stored(url) if (folder / "results.db").exists() else []), output


def stored(url: str) -> list[dict[str, Any]]:
    """Each stored trial: its identity, status, environment, times, costs and loss series."""
    with Session(make_engine(url)) as session:
        trials = []
        for trial in session.scalars(select(Trial).order_by(Trial.method, Trial.seed)):
            results = session.execute(
                select(Result.name, Result.value).where(Result.trial_id == trial.id)
            )
            losses = session.scalars(
                select(MetricPoint.value)
                .where(MetricPoint.trial_id == trial.id, MetricPoint.name == "train_loss")
                .order_by(MetricPoint.step)
            )
            environment = trial.environment or {}
            trials.append(
                {
                    "method": trial.method,
                    "seed": trial.seed,
                    "status": trial.status,
                    "error": (trial.error or "")[-500:] or None,
                    "device_name": environment.get("device_name"),
                    "gpus_seen": environment.get("cuda_visible_devices"),
                    "started": trial.started_at.timestamp() if trial.started_at else None,
                    "ended": trial.ended_at.timestamp() if trial.ended_at else None,
                    **{name: value for name, value in results if name in COSTS},
                    "train_loss": list(losses),
                }
            )
    return trials


def bf16_step(folder: Path, dry_run: bool, steps: int) -> Step:
    """Step 1: the bf16 suite's tokens/s, MFU and peak memory per trial."""
    trials, output = run_suite(base_suite("gpu-check-bf16", dry_run, steps), folder / "bf16")
    ok = bool(trials) and all(t["status"] == "done" and t.get("mfu") for t in trials)
    return {"status": "passed" if ok else "failed", "trials": trials, "output": output}


def ddp_suite(dry_run: bool, parallel: bool) -> dict[str, Any]:
    """Step 2's suite: fp32, 20 steps, evaluated at each; with `parallel`, DDP on 2 GPUs."""
    suite = base_suite("gpu-check-ddp" if parallel else "gpu-check-single", dry_run, 20)
    suite["defaults"]["precision"] = "fp32"
    suite["defaults"]["train"] |= {"eval_every": 1, "eval_batches": 1, "compile": False}
    suite["methods"], suite["baseline"] = {"pre-ln": {}}, "pre-ln"
    if parallel:
        suite["defaults"]["train"]["parallel"] = "ddp"
        suite["resources"] = {"gpus": 2}
    return suite


def ddp_steps(folder: Path, dry_run: bool, found: list[str]) -> tuple[Step, Step]:
    """Steps 2 and 3: one trial on one GPU and on 2 with DDP, and their losses compared."""
    if "parallel" not in TrainSpec.model_fields:
        why = "this LayerBench has no `train.parallel` (issue 40 items 1-2 are not merged)"
        return {"status": "skipped", "message": why}, {"status": "skipped", "message": why}
    if len(found) < 2 or dry_run:
        why = f"DDP needs 2 CUDA GPUs; this machine has {len(found)}"
        return {"status": "skipped", "message": why}, {"status": "skipped", "message": why}
    single, _ = run_suite(ddp_suite(dry_run, parallel=False), folder / "single")
    ddp, output = run_suite(ddp_suite(dry_run, parallel=True), folder / "ddp")
    ran = bool(ddp) and ddp[0]["status"] == "done"
    step = {"status": "passed" if ran else "failed", "trials": ddp, "output": output}
    return step, equality(single, ddp)


def equality(single: list[dict[str, Any]], ddp: list[dict[str, Any]]) -> Step:
    """Step 3: the largest relative difference between the two loss series."""
    if not single or not ddp or not single[0]["train_loss"]:
        return {"status": "failed", "message": "a trial stored no loss series"}
    one, many = single[0]["train_loss"], ddp[0]["train_loss"]
    if len(one) != len(many):
        return {"status": "failed", "message": f"{len(one)} vs {len(many)} losses"}
    worst = max(abs(a - b) / abs(a) for a, b in zip(one, many, strict=True))
    return {
        "status": "passed" if worst <= DDP_TOLERANCE else "failed",
        "max_relative_difference": worst,
        "tolerance": DDP_TOLERANCE,
        "steps": len(one),
    }


def placement_step(folder: Path, dry_run: bool) -> Step:
    """Step 4: 4 trials, 2 workers: each on one GPU of its own while it runs."""
    suite = base_suite("gpu-check-placement", dry_run, 50)
    suite["seeds"] = [0, 1]
    suite["defaults"]["train"] |= {"compile": False}
    env = {}
    if dry_run:  # two fake GPUs: the trials run on the CPU, the runner places them all the same
        suite["resources"], env = {"gpus": 1}, {"CUDA_VISIBLE_DEVICES": "0,1"}
    trials, output = run_suite(suite, folder / "placement", workers=2, env=env)
    problems = [
        f"{t['method']}/{t['seed']}: {t['status']}" for t in trials if t["status"] != "done"
    ]
    problems += [
        f"{t['method']}/{t['seed']} saw {t['gpus_seen']!r}" for t in trials if not one_gpu(t)
    ]
    for a, b in combinations(trials, 2):
        if a["gpus_seen"] == b["gpus_seen"] and overlap(a, b):
            problems.append(f"{a['method']}/{a['seed']} and {b['method']}/{b['seed']} shared it")
    ok = len(trials) == 4 and not problems
    return {
        "status": "passed" if ok else "failed",
        "problems": problems,
        "trials": trials,
        "output": output,
    }


def one_gpu(trial: dict[str, Any]) -> bool:
    seen = trial["gpus_seen"]
    return isinstance(seen, str) and len(seen.split(",")) == 1 and seen != ""


def overlap(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Did the two trials run at the same time (by their stored start and end)?"""
    if None in (a["started"], a["ended"], b["started"], b["ended"]):
        return True
    return bool(a["started"] < b["ended"] and b["started"] < a["ended"])


def summary(report: dict[str, Any]) -> str:
    """The Markdown summary of a report."""
    lines = [
        f"# GPU check, {report['date']}",
        "",
        f"Machine: {report['host']}; GPUs: {', '.join(report['gpus']) or 'none'}"
        + (" (dry run: CPU, tiny model)" if report["dry_run"] else "")
        + f"; {report['seconds']:.0f} s.",
        "",
        "| step | status | figures |",
        "|---|---|---|",
    ]
    for name, step in report["steps"].items():
        lines.append(f"| {name} | {step['status']} | {figures(step)} |")
    return "\n".join(lines) + "\n"


def figures(step: Step) -> str:
    if "message" in step:
        return step["message"]
    if "max_relative_difference" in step:
        worst = step["max_relative_difference"]
        return f"max relative difference {worst:.2e} over {step['steps']} steps"
    shown = []
    for t in step.get("trials", []):
        rate, mfu, memory = t.get("tokens_per_s"), t.get("mfu"), t.get("peak_memory_bytes")
        cost = (
            f"{rate:,.0f} tokens/s, MFU {100 * mfu:.2f}%, peak {memory / 2**20:,.0f} MiB"
            if rate and mfu and memory
            else t["status"]
        )
        where = f"GPU {t['gpus_seen']}" if t["gpus_seen"] else t["device_name"]
        shown.append(f"{t['method']}/s{t['seed']} on {where}: {cost}")
    return "; ".join(shown + step.get("problems", [])) or "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_check"))
    parser.add_argument("--steps", type=int, default=300, help="steps of the bf16 trials")
    parser.add_argument("--dry-run", action="store_true", help="CPU only, tiny (checks the script)")
    args = parser.parse_args(argv)
    found = gpus()
    if not found and not args.dry_run:
        print("error: no CUDA GPU here; --dry-run checks the script on the CPU", file=sys.stderr)
        return 2
    steps = 4 if args.dry_run else args.steps
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        report_steps = {"bf16": bf16_step(folder, args.dry_run, steps)}
        report_steps["ddp"], report_steps["equality"] = ddp_steps(folder, args.dry_run, found)
        report_steps["placement"] = placement_step(folder, args.dry_run)
    report = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "host": os.uname().nodename,
        "gpus": found,
        "dry_run": args.dry_run,
        "seconds": time.perf_counter() - started,
        "steps": report_steps,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=2))
    (args.out / "gpu_check.md").write_text(summary(report))
    print(summary(report))
    return 1 if any(step["status"] == "failed" for step in report_steps.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
