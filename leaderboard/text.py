"""Names from the database shown in Streamlit's Markdown as the literal text they are."""

from __future__ import annotations

import re

INLINE = re.compile(r"([\\`*_\[\]{}<>()!|~$:&#])")
"""Characters that start emphasis, code, links, HTML, entities, emoji, LaTeX or headings."""
BULLET = re.compile(r"^(\s*)([-+=])")
"""A leading list bullet or setext underline."""
ORDERED = re.compile(r"^(\s*\d+)([.)])")
"""A leading ordered-list number."""


def plain(text: object) -> str:
    """`text` backslash-escaped (CommonMark) for `st.markdown`-like calls: shown literally."""
    escaped = INLINE.sub(r"\\\1", str(text))
    return ORDERED.sub(r"\1\\\2", BULLET.sub(r"\1\\\2", escaped))
