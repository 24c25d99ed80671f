"""Tie groups: the ranks a method could hold given which of its comparisons are separable.

The strict order of a group (`harness.ranking.groups.group_rows`) breaks every tie; a reader
also needs to know which neighbours the data cannot tell apart (HELM, MTEB and OpenCompass are
asked for the same). The rule, per (task, model) group:

- every pair of methods is compared as the win rates compare them
  (`harness.ranking.groups.compare`): the one
  with more failed seeds where the other finished loses; otherwise the paired test over the
  seeds (or examples) both finished, its p-values Holm-adjusted over all the group's pairs
  (Holm, 1979). A pair is **separable** when decided by failures or when the adjusted p < alpha;
- a method's **rank interval** runs from 1 + (the methods separably better than it) to
  n - (the methods separably worse), widened to hold its strict position. "1-3" reads: any of
  ranks 1 to 3 is consistent with the tests; "2" alone: the method is separated from all others.
  Methods whose intervals overlap are not separable from each other by this rule;
- **overall** (the summary), one method is separably better than another when it is so in every
  group where both ran; the intervals follow from that relation over the summary's order.

This is the rank-interval reading of pairwise tests (as in Holm-adjusted "rank ranges" of
league tables, e.g. Goldstein & Spiegelhalter, 1996); the strict position stays in `rank` and
`position`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from harness.stats.paired import holm


def separations(
    m: int, pairs: tuple[np.ndarray, np.ndarray], compared: tuple[np.ndarray, ...], alpha: float
) -> np.ndarray:
    """m x m: +1 where method i is separably better than j, -1 where worse, 0 where neither.
    `pairs` are the index arrays (i, j) of the compared pairs and `compared` their (failure
    sign, decided by failures, p, sign of the difference) (`harness.ranking.groups.compare`)."""
    i, j = pairs
    by_failure, decisive, p, by_diff = compared
    p = np.where(decisive, np.nan, p)
    tested = ~np.isnan(p)
    p[tested] = holm(p[tested])
    sign = np.where(decisive, by_failure, np.where(tested & (p < alpha), by_diff, 0.0))
    found = np.zeros((m, m))
    found[i, j], found[j, i] = sign, -sign
    return found


def interval_label(low: int, high: int) -> str:
    """A single rank ("2") or a range ("1-3")."""
    return str(low) if low == high else f"{low}-{high}"


def rank_intervals(order: Sequence[str], better: dict[tuple[str, str], bool]) -> dict[str, str]:
    """Each method's rank interval (see the module doc); `order` is the strict order, best first,
    `better[(a, b)]` whether a is separably better than b."""
    n = len(order)
    found = {}
    for position, method in enumerate(order, start=1):
        above = sum(better.get((other, method), False) for other in order)
        below = sum(better.get((method, other), False) for other in order)
        found[method] = interval_label(min(1 + above, position), max(n - below, position))
    return found
