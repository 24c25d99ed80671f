"""suite runs record the keys of the suite's planned trials, so the leaderboard ranks the
current plan and not trials of an older config or package version

Revision ID: 0005_suite_run_plan
Revises: 0004_nightly_alerts
"""

import sqlalchemy as sa
from alembic import op

revision = "0005_suite_run_plan"
down_revision = "0004_nightly_alerts"


def upgrade() -> None:
    with op.batch_alter_table("suite_runs") as batch_op:
        batch_op.add_column(sa.Column("trial_keys", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("suite_runs") as batch_op:
        batch_op.drop_column("trial_keys")
