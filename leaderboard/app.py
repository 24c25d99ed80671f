"""The LayerBench leaderboard (Streamlit): `layerbench leaderboard` serves it (SPEC section 9).

It reads the results database named by `LAYERBENCH_DB` (or the default), read-only. The sidebar's
filters are shared by the pages; every number shown comes from `harness.ranking`.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from harness.store.url import database_url
from leaderboard.state import sidebar

VIEWS = Path(__file__).with_name("views")
# The tables are wide: they get the width Streamlit's side padding (5rem each) would take, so the
# Findings table fits 1400 px with the sidebar open.
NARROW_PADDING = (
    "<style>[data-testid='stMainBlockContainer'] {padding-left: 1rem; padding-right: 1rem;}</style>"
)


def main() -> None:
    st.set_page_config(page_title="LayerBench leaderboard", layout="wide")
    st.html(NARROW_PADDING)
    page = st.navigation(
        [
            st.Page(VIEWS / "leaderboard.py", title="Leaderboard", default=True),
            st.Page(VIEWS / "compare.py", title="Compare"),
            st.Page(VIEWS / "trial.py", title="Trial"),
            st.Page(VIEWS / "history.py", title="History"),
            st.Page(VIEWS / "findings.py", title="Findings"),
        ]
    )
    if sidebar(database_url()) is None:
        st.stop()
    page.run()


main()
