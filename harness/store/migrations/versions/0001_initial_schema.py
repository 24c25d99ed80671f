"""initial schema

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "suite_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("suite", sa.String(length=200), nullable=False),
        sa.Column("cadence", sa.String(length=20), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("host", sa.String(length=200), nullable=False),
        sa.Column("git_commit", sa.String(length=64), nullable=True),
        sa.Column("n_planned", sa.Integer(), nullable=False),
        sa.Column("n_ran", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("suite_runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_suite_runs_suite"), ["suite"], unique=False)

    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("suite", sa.String(length=200), nullable=False),
        sa.Column("method", sa.String(length=200), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("task", sa.String(length=200), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("sweep", sa.JSON(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("failed_step", sa.Integer(), nullable=True),
        sa.Column("steps_done", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("train_time_s", sa.Float(), nullable=True),
        sa.Column("eval_time_s", sa.Float(), nullable=True),
        sa.Column("wall_time_s", sa.Float(), nullable=True),
        sa.Column("environment", sa.JSON(), nullable=True),
        sa.Column("claimed_by", sa.String(length=200), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("suite_run_id", sa.Integer(), nullable=True),
        sa.Column("mlflow_run_id", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(
            ["suite_run_id"],
            ["suite_runs.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key"),
    )
    with op.batch_alter_table("trials", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_trials_status"), ["status"], unique=False)
        batch_op.create_index(batch_op.f("ix_trials_suite"), ["suite"], unique=False)

    op.create_table(
        "layer_stats",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("layer", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("layer_stats", schema=None) as batch_op:
        batch_op.create_index("ix_layer_stats_trial", ["trial_id"], unique=False)

    op.create_table(
        "metric_series",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("train_time_s", sa.Float(), nullable=False),
        sa.Column("wall_time_s", sa.Float(), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("metric_series", schema=None) as batch_op:
        batch_op.create_index("ix_metric_series_trial_name", ["trial_id", "name"], unique=False)

    op.create_table(
        "results",
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("trial_id", "name"),
    )


def downgrade() -> None:
    op.drop_table("results")
    with op.batch_alter_table("metric_series", schema=None) as batch_op:
        batch_op.drop_index("ix_metric_series_trial_name")

    op.drop_table("metric_series")
    with op.batch_alter_table("layer_stats", schema=None) as batch_op:
        batch_op.drop_index("ix_layer_stats_trial")

    op.drop_table("layer_stats")
    with op.batch_alter_table("trials", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_trials_suite"))
        batch_op.drop_index(batch_op.f("ix_trials_status"))

    op.drop_table("trials")
    with op.batch_alter_table("suite_runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_suite_runs_suite"))

    op.drop_table("suite_runs")
