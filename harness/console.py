"""Terminal output: progress bars over trials and steps, and problem messages."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from harness.core import Status
from harness.records import PlannedTrial, TrialResult
from harness.utils import end_startup

console = Console()
errors = Console(stderr=True)


class RichProgress:
    """One bar over the suite's trials and one per running trial over its steps."""

    def __init__(self, total: int) -> None:
        self.bars = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(),
            console=console,
        )
        self.overall = self.bars.add_task("trials", total=total, note="")
        self.steps: dict[str, TaskID] = {}

    def __enter__(self) -> RichProgress:
        end_startup()  # the trials start: the command's imports are over (`harness.cli.main`)
        self.bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bars.stop()

    def started(self, trial: PlannedTrial) -> None:
        total = trial.recipe.train.steps
        self.steps[trial.key] = self.bars.add_task(f"  {trial.label}", total=total, note="")

    def step(self, trial: PlannedTrial, step: int, total: int, loss: float) -> None:
        self.bars.update(self.steps[trial.key], completed=step, note=f"loss {loss:.4f}")

    def finished(self, trial: PlannedTrial, result: TrialResult | None) -> None:
        self.bars.advance(self.overall)
        if trial.key in self.steps:
            self.bars.remove_task(self.steps.pop(trial.key))
        if result is not None:
            status = Status(result.status)
            where = f" at step {result.failed_step}" if status is not Status.DONE else ""
            self.bars.console.print(
                f"[{status.style}]{status:>8}[/] {trial.label}{where} "
                f"({result.train_time_s:.1f} s train, {result.wall_time_s:.1f} s wall)"
            )
