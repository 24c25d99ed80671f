"""Preloaded last by the local runner's fork server: warms it (`harness.runner.warm`)."""

from harness.runner.warm import warm_up_from_env

warm_up_from_env()
