"""Preloaded first by the local runner's fork server: its start-up (imports and warm-up) runs
without the cyclic garbage collector, which `harness.runner.warm_server` resumes, and its exit,
once its runner has gone, does not free what it imported (`harness.utils.exit_now`): its
standard streams are the runner's, so whoever reads the runner's output until it closes (a
pipe, `subprocess.run`) would otherwise wait for that too."""

import atexit

from harness.utils import begin_startup, exit_now

begin_startup()
atexit.register(exit_now)
