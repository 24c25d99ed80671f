"""Screenshots of the leaderboard for the README, taken in Debian's Chromium at 1400 px wide from
the committed result databases (docs/results/data/*.db).

The findings suites and the optimizers suite are stored one database each; a copy of them merged
into one (ids shifted, nothing else changed) is served, so the Findings page's "All suites" view
lists every claim of every findings suite. Shots:

- findings-all-suites.png: Findings, All suites, sorted by verdict;
- findings-mix-ln.png: Findings, the mix-ln suite;
- leaderboard-tie-groups.png: the Leaderboard of findings-mix-ln (Overall and per-task tables
  with their tie groups);
- trial.png: the Trial page of an optimizers trial (ranked on test_loss, which has no series:
  the page plots the tuning metric's, val_loss).

Run: `PYTHONPATH=. .venv/bin/python benchmarks/screenshots.py [--out docs/screenshots]`.
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright
from sqlalchemy import Engine, func, insert, select
from sqlalchemy.orm import Session

from benchmarks.browser import START_TIMEOUT_S, TABLE, launch, serve
from harness.store.db import make_engine, open_database
from harness.store.models import Base, Trial

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "results" / "data"
WIDTH = 1400
TRIAL = {"suite": "optimizers", "method": "muon", "task": "shakespeare", "seed": 0}


def merge(sources: list[Path], url: str) -> Engine:
    """A new database at `url` holding every row of the SQLite `sources` (same schema), each
    source's integer ids shifted past the rows already merged (foreign keys with them)."""
    target = open_database(url)
    for path in sources:
        source = make_engine(f"sqlite:///{path}", read_only=True)
        with Session(target) as session, session.begin():
            offsets = {
                table.name: session.scalar(select(func.coalesce(func.max(table.c.id), 0))) or 0
                for table in Base.metadata.sorted_tables
                if "id" in table.c
            }
            for table in Base.metadata.sorted_tables:
                with source.connect() as connection:
                    rows = [dict(row._mapping) for row in connection.execute(select(table))]
                for row in rows:
                    shift(table, row, offsets)
                if rows:
                    session.execute(insert(table), rows)
        source.dispose()
    return target


def shift(table: object, row: dict[str, object], offsets: dict[str, int]) -> None:
    """Add the offsets to the row's own id and to the ids its foreign keys name."""
    for column in table.c:  # type: ignore[attr-defined]
        value = row.get(column.name)
        if not isinstance(value, int):
            continue
        if column.name == "id":
            row[column.name] = value + offsets[table.name]  # type: ignore[attr-defined]
        for key in column.foreign_keys:
            row[column.name] = value + offsets[key.column.table.name]


def trial_key(engine: Engine) -> str:
    query = select(Trial.key).where(*(getattr(Trial, k) == v for k, v in TRIAL.items()))
    with Session(engine) as session:
        return session.scalars(query).first() or ""


def shoot(page: Page, address: str, path: Path, height: int, ready: str = TABLE) -> None:
    """A screenshot of the page at `address`, once `ready` (a selector) shows."""
    page.set_viewport_size({"width": WIDTH, "height": height})
    page.goto(address)
    page.locator(ready).first.wait_for(timeout=START_TIMEOUT_S * 1000)
    page.wait_for_timeout(2000)  # the glide grids and plotly draw after the element appears
    page.screenshot(path=path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    sources = [*sorted(DATA.glob("findings-*.db")), DATA / "optimizers.db"]
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/screenshots.db"
        copies = [Path(shutil.copy(path, folder)) for path in sources]  # the committed files,
        key = trial_key(merge(copies, url))  # and their -wal/-shm, stay as they are
        with serve(url, Path(folder) / "server.log") as address, sync_playwright() as playwright:
            browser = launch(playwright)
            page = browser.new_page(viewport={"width": WIDTH, "height": 1000})
            shoot(page, address + "findings", out / "findings-all-suites.png", 1500)
            radio = page.locator('[data-testid="stRadioOption"]')
            radio.filter(has_text=re.compile(r"^mix-ln$")).first.click()
            expect(page.locator(TABLE).first).to_be_visible()
            page.wait_for_timeout(2000)
            page.screenshot(path=out / "findings-mix-ln.png")
            shoot(
                page, address + "?suite=findings-mix-ln", out / "leaderboard-tie-groups.png", 1000
            )
            trial = address + f"trial?suite=optimizers&key={key}"
            shoot(page, trial, out / "trial.png", 1500, ".js-plotly-plot")
            browser.close()
    for path in sorted(out.glob("*.png")):
        print(path)


if __name__ == "__main__":
    main()
