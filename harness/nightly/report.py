"""The nightly report: `reports/nightly-YYYY-MM-DD.md` and `.json`, and the webhook that gets it.

Regressions come first (old window -> new values with their CIs, delta, p, z, the commits and
package versions that changed between the runs), then suspected changes, improvements, status
changes, the `expect` claims whose verdict changed, and one line per suite.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

from harness.nightly.run import SuiteOutcome
from harness.ranking.table import EMPTY
from harness.repro import rerun_comparison
from harness.store.models import Alert

SECTIONS = (
    ("regressions", "regression", "Regressions"),
    ("suspected", "suspected", "Suspected (flagged once, confirmed if flagged again)"),
    ("improvements", "improvement", "Improvements"),
    ("status_changes", "status", "Status changes (always a regression)"),
    ("verdicts", "verdict", "Claim verdicts changed since the previous run"),
)
NOTIFY_TIMEOUT_S = 10.0


class NotifyError(RuntimeError):
    """The webhook could not be reached or refused the report."""


def alert_record(alert: Alert) -> dict[str, Any]:
    """An alert as plain JSON."""
    return {
        "id": alert.id,
        "suite": alert.suite,
        "suite_run": alert.suite_run_id,
        "method": alert.method,
        "model": alert.model,
        "task": alert.task,
        "metric": alert.metric,
        "kind": alert.kind,
        "direction": alert.direction,
        "old": {"mean": alert.old_mean, "ci": [alert.old_ci_low, alert.old_ci_high]},
        "new": {"mean": alert.new_mean, "ci": [alert.new_ci_low, alert.new_ci_high]},
        "delta": alert.delta,
        "percent": alert.percent,
        "p": alert.p_value,
        "z": alert.z if alert.z is not None else alert.detail.get("z"),
        "tolerance": alert.tolerance,
        "commit_before": alert.commit_before,
        "commit_after": alert.commit_after,
        "packages_changed": alert.detail.get("packages_changed", {}),
        "detail": alert.detail,
        "acknowledged": alert.acknowledged,
    }


def rerun_command(alert: Alert, suite_path: str) -> str:
    """The `layerbench run` that reruns the alert's comparison: its method on its model and task
    (a claim's verdict: both methods on every recipe of the claim)."""
    methods = [alert.method, *filter(None, [alert.detail.get("than")])]
    return rerun_comparison(suite_path, methods, alert.model.split(", "), alert.task.split(", "))


def suite_summary(outcome: SuiteOutcome) -> dict[str, Any]:
    run = outcome.run
    kinds = [alert.kind for alert in outcome.alerts]
    return {
        "suite": outcome.suite.suite,
        "file": str(outcome.path),
        "suite_run": run.id if run else None,
        "git_commit": run.git_commit if run else None,
        "host_class": run.host_class if run else None,
        "started_at": run.started_at.isoformat() if run else None,
        "ended_at": run.ended_at.isoformat() if run and run.ended_at else None,
        "trials": outcome.statuses,
        "skipped": outcome.skipped,
        "interrupted": outcome.interrupted,
        "alerts": {kind: kinds.count(kind) for _, kind, _ in SECTIONS},
    }


def build_report(outcomes: Sequence[SuiteOutcome], day: date, code: int) -> dict[str, Any]:
    """The JSON report of one `layerbench nightly`."""
    alerts = [(outcome, alert) for outcome in outcomes for alert in outcome.alerts]
    report: dict[str, Any] = {"date": day.isoformat(), "exit_code": code}
    for name, kind, _ in SECTIONS:
        report[name] = [
            alert_record(a) | {"command": rerun_command(a, str(o.path))}
            for o, a in alerts
            if a.kind == kind
        ]
    report["suites"] = [suite_summary(outcome) for outcome in outcomes]
    return report


def number(value: Any, digits: int = 4) -> str:
    if value is None:
        return EMPTY
    if isinstance(value, str):
        return value
    return f"{value:.{digits}g}"


def interval(ci: Sequence[Any]) -> str:
    return EMPTY if ci[0] is None else f"[{number(ci[0])}, {number(ci[1])}]"


def alert_line(record: dict[str, Any]) -> str:
    """One alert as a markdown list item, with the command that reruns its comparison."""
    command = record.get("command")
    return alert_text(record) + (f"\n  - rerun: `{command}`" if command else "")


def alert_text(record: dict[str, Any]) -> str:
    """One alert's findings as a markdown list item."""
    name = f"**{record['suite']} / {record['method']} / {record['model']} / {record['task']}**"
    ack = " (acknowledged)" if record["acknowledged"] else ""
    if record["kind"] == "status":
        seeds = ", ".join(
            f"seed {seed}: {old} -> {new}" for seed, (old, new) in record["detail"]["seeds"].items()
        )
        return f"- #{record['id']} {name}: {seeds}{ack}" + changes(record)
    if record["kind"] == "verdict":
        return verdict_line(record, ack)
    old, new = record["old"], record["new"]
    percent = "" if record["percent"] is None else f" ({record['percent']:+.2f}%)"
    return (
        f"- #{record['id']} {name} {record['metric']} {record['direction']}: "
        f"{number(old['mean'])} {interval(old['ci'])} -> {number(new['mean'])} "
        f"{interval(new['ci'])}, delta {number(record['delta'])}{percent}, "
        f"p {number(record['p'], 3)}, z {number(record['z'], 3)}, "
        f"tolerance {number(record['tolerance'], 3)}{ack}" + changes(record)
    )


def verdict_line(record: dict[str, Any], ack: str) -> str:
    """A claim whose verdict changed: both verdicts, then each recipe's new evidence."""
    detail = record["detail"]
    old, new = detail["verdicts"]
    checks = "".join(
        f"\n  - {check['model']} / {check['task']}: delta {number(check['delta'])} "
        f"{interval([check['ci_low'], check['ci_high']])}, p {number(check['p_value'], 3)}, "
        f"{check['verdict']}"
        for check in detail["checks"]
    )
    return (
        f"- #{record['id']} **{record['suite']}**: {detail['claim']} ({detail['source']}): "
        f"{old} -> {new}{ack}{checks}" + changes(record)
    )


def changes(record: dict[str, Any]) -> str:
    """The commits and package versions that changed between the compared runs."""
    before, after = record["commit_before"], record["commit_after"]
    parts = []
    if before != after:
        parts.append(f"commit {(before or 'unknown')[:12]} -> {(after or 'unknown')[:12]}")
    parts += [f"{name} {old} -> {new}" for name, (old, new) in record["packages_changed"].items()]
    if not parts:
        return "\n  - no commit or package version changed"
    return f"\n  - changed: {'; '.join(parts)}"


def summary_line(summary: dict[str, Any]) -> str:
    if summary["skipped"]:
        return f"- {summary['suite']}: skipped, {summary['skipped']}"
    trials = ", ".join(f"{n} {status}" for status, n in sorted(summary["trials"].items()))
    alerts = ", ".join(f"{n} {kind}" for kind, n in summary["alerts"].items())
    state = " (interrupted)" if summary["interrupted"] else ""
    commit = (summary["git_commit"] or "no commit")[:12]
    return (
        f"- {summary['suite']}: suite run #{summary['suite_run']}{state} at {commit} on "
        f"{summary['host_class']}: {trials or 'no trials'}; {alerts}"
    )


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Nightly report {report['date']}", ""]
    for name, _, title in SECTIONS:
        lines += [f"## {title}", ""]
        lines += [alert_line(record) for record in report[name]] or ["none"]
        lines.append("")
    lines += ["## Suites", "", *map(summary_line, report["suites"]), ""]
    lines.append(f"Exit code {report['exit_code']}.")
    return "\n".join(lines) + "\n"


def write_report(report: dict[str, Any], directory: Path) -> tuple[Path, Path]:
    """Write the markdown and JSON reports; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = directory / f"nightly-{report['date']}"
    md, js = stem.with_suffix(".md"), stem.with_suffix(".json")
    md.write_text(markdown(report))
    js.write_text(json.dumps(report, indent=2) + "\n")
    return md, js


def notify(url: str, report: dict[str, Any]) -> None:
    """POST the JSON report to a webhook."""
    request = urllib.request.Request(
        url,
        data=json.dumps(report).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=NOTIFY_TIMEOUT_S) as response:
            response.read()
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise NotifyError(f"could not post the report to {url}: {error}") from None
