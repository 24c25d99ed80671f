"""The verdicts of a suite's published claims (`expect`), from its trial outcomes.

- `checks`: `findings`, each claim checked per recipe (paired tests, Holm, equivalence, the
  degenerate case of two untrained methods);
- `decision`: one recipe's check decided (verdict, intervals, seeds needed);
- `sequential`: the anytime-valid decision under sequential seeds;
- `verdicts`: the records (`RecipeCheck`, `Finding`) and the words of their verdicts.

Pure: no store, no rendering; the ranking (`harness.ranking`) reports and renders them.
"""

from harness.claims.checks import TrivialLevels, findings
from harness.claims.verdicts import (
    IMPLICIT_SOURCE,
    CheckVerdict,
    ClaimVerdict,
    Finding,
    RecipeCheck,
    degenerate_pairs,
)

__all__ = [
    "IMPLICIT_SOURCE",
    "CheckVerdict",
    "ClaimVerdict",
    "Finding",
    "RecipeCheck",
    "TrivialLevels",
    "degenerate_pairs",
    "findings",
]
