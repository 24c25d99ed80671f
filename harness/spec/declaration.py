"""How a suite is ranked, as a suite run records it (`suite_runs.ranking`) and every reader
(`rank SUITE-NAME`, the leaderboard, `layerbench nightly`) reads it back.

Stored as a flat JSON object, `{"baseline", <the rank section's fields>, "models", "expect"}`
(the shape since migration 0001, so no data migration) and `"schedule"` for sequential seeds
only: `stored()` writes it, `read()` parses it, keeping the fields this version knows (a run of
another version may have others).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from harness.spec.rank import Claim, RankSpec, SeedSchedule
from harness.spec.schema import Suite


class RankingDeclaration(BaseModel):
    """The suite's baseline, `rank` section, models in suite order (the recipes of claims that
    list none) and `expect` claims."""

    model_config = ConfigDict(frozen=True)

    baseline: str | None = None
    rank: RankSpec = RankSpec()
    models: tuple[str, ...] = ()
    expect: tuple[Claim, ...] = ()
    schedule: SeedSchedule | None = None
    """Sequential seeds (`seeds: {initial, max, step}`): claims get anytime-valid verdicts."""

    @classmethod
    def of_suite(cls, suite: Suite) -> RankingDeclaration:
        """What a run of `suite` records."""
        return cls(
            baseline=suite.baseline,
            rank=suite.rank,
            models=tuple(suite.models),
            expect=tuple(suite.expect),
            schedule=suite.schedule,
        )

    @classmethod
    def read(cls, stored: dict[str, Any] | None) -> RankingDeclaration | None:
        """The declaration a run stored; None if it stored none (databases before 0001's
        `ranking` column was filled)."""
        if not stored:
            return None
        return cls(
            baseline=stored.get("baseline"),
            rank=RankSpec.model_validate(_known(stored, RankSpec)),
            models=tuple(stored.get("models", ())),
            expect=tuple(
                Claim.model_validate(_known(claim, Claim)) for claim in stored.get("expect", [])
            ),
            schedule=SeedSchedule.model_validate(stored["schedule"])
            if stored.get("schedule")
            else None,
        )

    def stored(self) -> dict[str, Any]:
        """The JSON object a suite run stores."""
        return {
            "baseline": self.baseline,
            **self.rank.model_dump(mode="json"),
            "models": list(self.models),
            "expect": [claim.model_dump(mode="json") for claim in self.expect],
            **({"schedule": self.schedule.model_dump()} if self.schedule else {}),
        }


def _known(stored: dict[str, Any], model: type[BaseModel]) -> dict[str, Any]:
    return {key: value for key, value in stored.items() if key in model.model_fields}
