"""The packaged SmolLM2's first use: its GGUF file dequantized and saved as safetensors.

    .venv/bin/python -m benchmarks.gguf_conversion [--repeats 2]

Each repeat converts `smollm2-135m` into a new temporary folder in this process
(`harness.models.pretrained.gguf_to_safetensors`, what a trial's first load of the model runs)
and prints its CPU and wall time and the sha256 of each file written, so that two checkouts
can be compared for speed and for identical output. Run it from a worktree with that worktree
on `PYTHONPATH` to measure an older commit.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path

from harness.cache import PACKAGED
from harness.models.pretrained import gguf_to_safetensors


def convert_once() -> tuple[float, float, dict[str, str]]:
    """CPU seconds, wall seconds and the written files' sha256 (first 12 hex digits)."""
    packaged = PACKAGED["smollm2-135m"]
    folder = packaged.package.require("model 'smollm2-135m'")
    with tempfile.TemporaryDirectory() as scratch:
        target = Path(scratch) / "smollm2-135m"
        cpu, wall = time.process_time(), time.perf_counter()
        gguf_to_safetensors(folder, packaged.gguf_file, target)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        digests = {
            path.name: hashlib.sha256(path.read_bytes()).hexdigest()[:12]
            for path in sorted(target.iterdir())
        }
    return cpu, wall, digests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    for _ in range(args.repeats):
        cpu, wall, digests = convert_once()
        print(f"conversion: {cpu:.1f} s of CPU, {wall:.1f} s wall; files {digests}")


if __name__ == "__main__":
    main()
