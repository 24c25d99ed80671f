"""LayerBench's lm-eval adapter vs `lm_eval.simple_evaluate` called directly, on SmolLM2-135M.

Same model object, same task, same limit: the metrics must be equal, and the adapter should
cost nothing measurable. Medians of `--repeats` alternating runs.

    .venv/bin/python -m benchmarks.lmeval_adapter --task lb_bigbench_hyperbaton --limit 40
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from harness.models.pretrained import PretrainedSpec, load_pretrained
from harness.tasks.catalog import LOCAL_TASKS
from harness.tasks.corpora import ModelTokenizer
from harness.tasks.lmeval import LMEvalTask, LMEvalTaskSpec, lm_eval_metrics


def direct(model: torch.nn.Module, tokenizer: Any, task: str, limit: int) -> dict[str, float]:
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    results = simple_evaluate(
        model=HFLM(pretrained=model, tokenizer=tokenizer, batch_size=8, device="cpu"),
        tasks=[task],
        task_manager=TaskManager(include_path=str(LOCAL_TASKS)),
        limit=limit,
        num_fewshot=0,
        log_samples=False,
        bootstrap_iters=0,
    )
    return lm_eval_metrics(results, task)


def timed(run: Callable[[], dict[str, float]]) -> tuple[float, dict[str, float]]:
    started = time.perf_counter()
    metrics = run()
    return time.perf_counter() - started, metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="lb_bigbench_hyperbaton")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    loaded = load_pretrained(PretrainedSpec(source="smollm2-135m"))
    task = LMEvalTask(
        LMEvalTaskSpec(task=args.task, limit=args.limit), ModelTokenizer(loaded.tokenizer)
    )
    ours, theirs = [], []
    with torch.no_grad():
        for _ in range(args.repeats):
            ours.append(timed(lambda: task.evaluate(loaded.model, batch_size=8).metrics))
            theirs.append(
                timed(lambda: direct(loaded.model, loaded.tokenizer, args.task, args.limit))
            )
    assert all(m == theirs[0][1] for _, m in ours + theirs), "the metrics differ"
    adapter, called = statistics.median(t for t, _ in ours), statistics.median(t for t, _ in theirs)
    print(f"task {args.task}, limit {args.limit}, {args.repeats} repeats")
    print(f"metrics (identical both ways): {theirs[0][1]}")
    print(
        f"median time: adapter {adapter:.2f} s, direct {called:.2f} s, ratio {adapter / called:.3f}"
    )


if __name__ == "__main__":
    main()
