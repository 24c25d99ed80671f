"""nightly runs: kind, status, host class and environment of a suite run; the alerts table

Revision ID: 0004_nightly_alerts
Revises: 0003_example_outcomes
"""

import sqlalchemy as sa
from alembic import op

revision = "0004_nightly_alerts"
down_revision = "0003_example_outcomes"


def upgrade() -> None:
    with op.batch_alter_table("suite_runs") as batch_op:
        batch_op.add_column(
            sa.Column("kind", sa.String(length=20), nullable=False, server_default="run")
        )
        batch_op.add_column(sa.Column("status", sa.String(length=20), nullable=True))
        batch_op.add_column(sa.Column("host_class", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("environment", sa.JSON(), nullable=True))
        batch_op.create_index("ix_suite_runs_host_class", ["host_class"], unique=False)
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("suite_run_id", sa.Integer(), nullable=False),
        sa.Column("suite", sa.String(length=200), nullable=False),
        sa.Column("method", sa.String(length=200), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("task", sa.String(length=200), nullable=False),
        sa.Column("metric", sa.String(length=100), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("direction", sa.String(length=10), nullable=False),
        *[
            sa.Column(name, sa.Float(), nullable=True)
            for name in (
                "old_mean",
                "old_ci_low",
                "old_ci_high",
                "new_mean",
                "new_ci_low",
                "new_ci_high",
                "delta",
                "percent",
                "p_value",
                "z",
                "tolerance",
            )
        ],
        sa.Column("commit_before", sa.String(length=64), nullable=True),
        sa.Column("commit_after", sa.String(length=64), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("acknowledged", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["suite_run_id"], ["suite_runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("alerts") as batch_op:
        batch_op.create_index("ix_alerts_suite", ["suite"], unique=False)


def downgrade() -> None:
    op.drop_table("alerts")
    with op.batch_alter_table("suite_runs") as batch_op:
        batch_op.drop_index("ix_suite_runs_host_class")
        for column in ("environment", "host_class", "status", "kind"):
            batch_op.drop_column(column)
