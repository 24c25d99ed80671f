"""No module of the harness or the leaderboard over 450 lines (issue 37): a longer one holds more
than one concern, and is split by concern as `harness/ranking/` was."""

from __future__ import annotations

from tests.factories import ROOT

MAX_LINES = 450


def line_counts() -> dict[str, int]:
    modules = [*(ROOT / "harness").rglob("*.py"), *(ROOT / "leaderboard").rglob("*.py")]
    return {
        path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines()) for path in modules
    }


def test_no_module_is_over_the_limit() -> None:
    counts = line_counts()
    over = {path: lines for path, lines in sorted(counts.items()) if lines > MAX_LINES}
    assert over == {}, over


def test_the_count_reads_every_module() -> None:
    counts = line_counts()
    assert counts["harness/registry.py"] > 0 and counts["leaderboard/app.py"] > 0
