"""Preloaded first by the local runner's fork server: its start-up (imports and warm-up) runs
without the cyclic garbage collector, which `harness.runner.warm_server` resumes."""

from harness.utils import begin_startup

begin_startup()
