"""`python -m leaderboard.serve [--port N]`: the Streamlit server of the leaderboard app.

The app's modules (and scipy.stats, which the ranking imports on first use) are imported before
the server starts, so the first visitor does not wait for them. `layerbench leaderboard` runs this.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import scipy.stats  # noqa: F401 (imported ahead of the first page)
from streamlit.web.cli import main as streamlit

from leaderboard import state, tables  # noqa: F401 (imported ahead of the first page)

APP = Path(__file__).with_name("app.py")


def streamlit_args(port: int) -> list[str]:
    return [
        *("run", str(APP), "--server.port", str(port), "--server.headless", "true"),
        *("--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"),
        *("--client.toolbarMode", "viewer"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the LayerBench leaderboard.")
    parser.add_argument("--port", type=int, default=8501)
    streamlit(streamlit_args(parser.parse_args().port), prog_name="streamlit")


if __name__ == "__main__":
    main()
