"""`layerbench rank` on the committed result databases prints what it printed when the snapshot
was recorded (issue 25: every rendered table unchanged). Record a deliberate change with
`python benchmarks/rank_snapshot.py --write` and review the diff."""

from __future__ import annotations

from benchmarks.rank_snapshot import differences, outputs


def test_rank_outputs_match_the_snapshot() -> None:
    diffs = differences(outputs())
    assert not diffs, "\n".join(diffs)
