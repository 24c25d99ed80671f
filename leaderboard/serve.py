"""`python -m leaderboard.serve [--port N] [--address A]`: the leaderboard's Streamlit server.

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


def streamlit_args(port: int, address: str = "127.0.0.1") -> list[str]:
    """Streamlit's command line; it listens on `address` only (this machine, by default)."""
    return [
        *("run", str(APP), "--server.port", str(port), "--server.address", address),
        *("--server.headless", "true"),
        *("--server.fileWatcherType", "none", "--browser.gatherUsageStats", "false"),
        *("--client.toolbarMode", "viewer"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the LayerBench leaderboard.")
    parser.add_argument("--port", type=int, default=8501)
    parser.add_argument("--address", default="127.0.0.1")
    args = parser.parse_args()
    streamlit(streamlit_args(args.port, args.address), prog_name="streamlit")


if __name__ == "__main__":
    main()
