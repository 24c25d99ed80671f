"""Where the test suite's CPU goes: machine-wide CPU-seconds busy and idle around pytest runs.

    .venv/bin/python -m benchmarks.tests_cpu                  # each test file alone, largest first
    .venv/bin/python -m benchmarks.tests_cpu tests/test_ray.py tests/test_slurm.py
    .venv/bin/python -m benchmarks.tests_cpu --whole          # `make test`'s pytest command

The figures come from `/proc/stat` (all processes: the tests' subprocesses, Ray, Slurm's jobs,
PostgreSQL, Chromium), so run it on an otherwise idle machine. A file run alone includes a
pytest start-up; `--whole` tells whether the suite is out of CPU (idle near zero) or waiting.
Start what the tests need first (`make postgres chromium slurm`, as root).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHOLE = ["-n", "2", "--dist", "loadfile"]


def cpu_seconds() -> tuple[float, float]:
    """Machine-wide (busy, idle) CPU-seconds since boot (`/proc/stat`'s first line)."""
    with open("/proc/stat") as stat:
        ticks = [int(field) for field in stat.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = ticks
    busy = user + nice + system + irq + softirq + steal
    return busy / 100, (idle + iowait) / 100


def measure(pytest_args: list[str]) -> tuple[int, float, float, float]:
    """pytest's exit code, wall seconds, busy and idle CPU-seconds."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args]
    busy, idle = cpu_seconds()
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, check=False)
    wall = time.perf_counter() - started
    busy_after, idle_after = cpu_seconds()
    return done.returncode, wall, busy_after - busy, idle_after - idle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="test files (default: every tests/test_*.py)")
    parser.add_argument("--whole", action="store_true", help="the whole suite as `make test`")
    args = parser.parse_args()
    if args.whole:
        code, wall, busy, idle = measure(WHOLE)
        print(
            f"whole suite (exit {code}): {wall:.1f} s wall, {busy:.0f} CPU-s busy, {idle:.0f} idle"
        )
        return
    files = args.files or sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("tests/test_*.py"))
    rows = []
    for file in files:
        code, wall, busy, _ = measure(["-p", "no:xdist", file])
        rows.append((busy, wall, code, file))
        print(f"{file}: {busy:.1f} CPU-s, {wall:.1f} s wall (exit {code})", flush=True)
    print("\nlargest first:")
    for busy, wall, code, file in sorted(rows, reverse=True):
        print(f"{busy:8.1f} CPU-s {wall:8.1f} s  {file}" + ("" if code == 0 else f"  exit {code}"))
    print(f"{sum(row[0] for row in rows):8.1f} CPU-s in all, {len(rows)} pytest start-ups")


if __name__ == "__main__":
    main()
