"""LayerBench: a declarative benchmark and leaderboard harness for layerwise methods."""

import os
from pathlib import Path

from harness.logs import LOG_FILE_ENV, route_logs

if LOG_FILE_ENV in os.environ:  # a trial process of a `layerbench` command: see harness/logs.py
    route_logs(Path(os.environ[LOG_FILE_ENV]))
