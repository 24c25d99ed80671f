"""Functions the local lm-eval task YAMLs name with `!function`."""

from harness.tasks.bigbench import load_task

__all__ = ["load_task"]
