"""What the runner declares: the backends that run a suite's trials (see harness/registry.py);
the metrics every trial reports are declared in harness/trial_metrics.py. Importing this module
imports neither torch, Ray nor submitit: choosing a backend imports only its own module, on
first use.
"""

from __future__ import annotations

from harness.registry import BACKENDS

BACKENDS.declare(
    "local",
    "harness.runner.local:local_backend",
    summary="trial processes on this machine (`--workers` at once), started by a warm fork server",
)
BACKENDS.declare(
    "ray",
    "harness.runner.ray_backend:ray_backend",
    summary="Ray tasks on the cluster at `--ray-address` (else $RAY_ADDRESS, else a local Ray)",
)
BACKENDS.declare(
    "slurm",
    "harness.runner.slurm_backend:slurm_backend",
    summary="Slurm jobs submitted with submitit (the suite's `slurm:` and the `--slurm-*` flags)",
)
