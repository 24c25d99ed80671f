"""How long ranking and the Leaderboard page take on a database of 100,000 trials.

    .venv/bin/python -m benchmarks.leaderboard [--repeats 5] [--seeds 1000] [--db PATH]

Generates the database once and caches it (default `/tmp/leaderboard-bench-<trials>.db`): 20
methods x 5 tasks x `--seeds` seeds, with diverged and failed trials, series and layer statistics,
written in bulk (`tests.factories.store_bulk`). Then measures, as medians over the repeats:

- read + rank: `harness.ranking.suite.rank_suite` on the suite's name, the one path the CLI and
  the leaderboard take (the recorded plan, the stored outcomes, the ranking);
- read: its reads alone (`plan_outcomes`: the columns ranking needs, no ORM objects);
- rank: the pure `harness.ranking.rank` on outcomes already read (scipy already imported);
- script, cold: one run of the app's Leaderboard page in `streamlit.testing` with Streamlit's
  caches cleared (database reads + ranking + tables; the process has imported everything);
- script, warm: a rerun with warm caches (what each widget change costs);
- browser, new server: `layerbench leaderboard` started fresh, Chromium opens the page, until the
  first row of the ranked table shows the top method (the server's caches are empty);
- browser, running server: the same in a new browser page on a server that has served it before.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from playwright.sync_api import Browser, expect, sync_playwright

from benchmarks.browser import launch, open_leaderboard, serve
from harness.core import Status
from harness.ranking import rank
from harness.ranking.suite import plan_outcomes, rank_suite, recorded
from harness.spec.declaration import RankingDeclaration
from harness.store.db import make_engine, upgrade
from leaderboard import data
from tests.factories import fake_result, planned, store_bulk

ROOT = Path(__file__).resolve().parents[1]
SUITE = "bench"
TASKS = [f"task-{i}" for i in range(5)]
DIVERGED, FAILED = 0.02, 0.01
NORMS = ["pre", "post", "peri", "mix", "hybrid", "normformer", "lns", "deepnorm"]
OPTIMIZERS = ["sgd", "lion", "lamb", "lars", "adafactor", "muon", "rmnp", "sinkgd"]
QUANT_BITS = [8, 4, 3, 2]
TIMEOUT_S = 120


def methods() -> dict[str, dict[str, object]]:
    """20 methods: norm placements, optimizers and weight quantizations over a baseline."""
    base = {"norm": {"placement": "pre"}, "optimizer": {"name": "adamw"}}
    found: dict[str, dict[str, object]] = {"baseline": base}
    found |= {f"{n}-ln": {**base, "norm": {"placement": n}} for n in NORMS[1:]}
    found |= {o: {**base, "optimizer": {"name": o}} for o in OPTIMIZERS}
    found |= {f"w{b}": {**base, "quantize": {"bits": b}} for b in QUANT_BITS}
    return found


def generate(path: Path, seeds: int) -> None:
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    upgrade(engine)
    rng = np.random.default_rng(0)
    offsets = {name: float(rng.normal(0, 0.05)) for name in methods()}
    results = []
    for trial in planned(SUITE, methods(), ["gpt-6l"], TASKS, range(seeds)):
        draw = rng.random()
        status = (
            Status.DIVERGED
            if draw < DIVERGED
            else Status.FAILED
            if draw < DIVERGED + FAILED
            else Status.DONE
        )
        bits = trial.config.get("quantize", {}).get("bits", 16)
        loss = 1.6 + offsets[trial.method] + 0.02 * (16 - bits) / 14 + rng.normal(0, 0.02)
        extra = {"effective_bits": float(bits), "model_bytes": bits * 1.2e6 / 8}
        results.append((trial, fake_result(status, float(loss), rng, extra)))
    store_bulk(engine, results, ranking=RankingDeclaration(baseline="baseline"))


def median_seconds(measure: Callable[[], float], repeats: int) -> tuple[float, list[float]]:
    times = [measure() for _ in range(repeats)]
    return statistics.median(times), times


def part_times(url: str, repeats: int) -> dict[str, tuple[float, list[float]]]:
    """Ranking through `harness.ranking`: read + rank, the reads alone, the ranking alone. Read +
    rank is measured first, as `layerbench rank` and the leaderboard run it: in a process that
    holds no other 100,000 outcomes (the ranking alone needs them held, and a heap that large
    made read + rank a fifth slower here: medians of 5 runs, 2.41 s against 2.05 s)."""
    engine = data.read_only_engine(url)
    rank_suite(engine, SUITE)  # imports scipy

    def timed(work: Callable[[], object]) -> Callable[[], float]:
        def measure() -> float:
            start = time.perf_counter()
            work()
            return time.perf_counter() - start

        return measure

    times = {
        "read + rank (`rank_suite`)": median_seconds(
            timed(lambda: rank_suite(engine, SUITE)), repeats
        ),
        "read (`plan_outcomes`)": median_seconds(
            timed(lambda: plan_outcomes(engine, recorded(engine, SUITE), nightly=True)), repeats
        ),
    }
    outcomes = plan_outcomes(engine, recorded(engine, SUITE), nightly=False)
    ranking = timed(lambda: rank(outcomes, "val_loss", "baseline"))
    return times | {"rank (`rank`)": median_seconds(ranking, repeats)}


def script_times(url: str, repeats: int) -> dict[str, tuple[float, list[float]]]:
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    os.environ["LAYERBENCH_DB"] = url
    app = AppTest.from_file(str(ROOT / "leaderboard" / "app.py"), default_timeout=120)
    app.run()  # imports everything once

    def cold() -> float:
        st.cache_resource.clear()
        start = time.perf_counter()
        app.run()
        return time.perf_counter() - start

    def warm() -> float:
        start = time.perf_counter()
        app.run()
        return time.perf_counter() - start

    assert not app.exception and len(app.dataframe) == 2
    return {
        "script, cold": median_seconds(cold, repeats),
        "script, warm": median_seconds(warm, repeats),
    }


def page_seconds(browser: Browser, address: str, top: str) -> float:
    """From navigation to the top method in the first row of the ranked table."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    start = time.perf_counter()
    expect(open_leaderboard(page, address, TIMEOUT_S)).to_have_text(top, timeout=TIMEOUT_S * 1000)
    elapsed = time.perf_counter() - start
    page.close()
    return elapsed


def browser_times(url: str, repeats: int, top: str) -> dict[str, tuple[float, list[float]]]:
    with sync_playwright() as playwright:
        browser = launch(playwright)

        def fresh() -> float:
            with serve(url) as address:
                return page_seconds(browser, address, top)

        first = median_seconds(fresh, repeats)
        with serve(url) as address:
            page_seconds(browser, address, top)
            running = median_seconds(lambda: page_seconds(browser, address, top), repeats)
        browser.close()
    return {"browser, new server": first, "browser, running server": running}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=1000, help="seeds per method and task")
    parser.add_argument("--db", type=Path, help="cached database (generated if absent)")
    parser.add_argument("--no-browser", action="store_true", help="skip the Streamlit runs")
    args = parser.parse_args()
    n_trials = len(methods()) * len(TASKS) * args.seeds
    args.db = args.db or Path(f"/tmp/leaderboard-bench-{n_trials}.db")
    if not args.db.exists():
        start = time.perf_counter()
        generate(args.db, args.seeds)
        print(f"generated {args.db} in {time.perf_counter() - start:.1f} s")
    url = f"sqlite:///{args.db}"
    ranking = rank_suite(data.read_only_engine(url), SUITE)
    assert ranking is not None
    top = ranking.summary[0].method
    print(f"{sum(s.n_trials for s in ranking.summary)} trials; top method: {top}")
    results = part_times(url, args.repeats)
    if not args.no_browser:
        results |= script_times(url, args.repeats) | browser_times(url, args.repeats, top)
    print("| measurement | median (s) | all runs (s) |\n|---|---|---|")
    for name, (median, times) in results.items():
        print(f"| {name} | {median:.2f} | {', '.join(f'{t:.2f}' for t in times)} |")


if __name__ == "__main__":
    main()
