"""What a trial's own process sets up before it runs: libraries kept quiet, and an end with the
runner that started it."""

from __future__ import annotations

import logging
import os
import platform
import sys

from harness.logs import detach_stream_handlers


def quiet_libraries() -> None:
    """Library progress bars and chatter would garble the runner's own progress display.
    transformers is quieted now if imported (the model stack), else by the environment it reads
    when it is: a trial of the built-in gpt never imports it."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        transformers_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    for name in ("lm_eval", "lm-eval", "datasets"):
        logging.getLogger(name).setLevel(logging.ERROR)
    detach_stream_handlers()  # torch's and transformers' own, attached at their import


def die_with_parent() -> None:
    """Linux: end this process if the runner that started it is killed."""
    if platform.system() == "Linux":
        import ctypes
        import signal

        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGKILL)
