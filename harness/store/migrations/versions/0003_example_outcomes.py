"""per-example outcomes of evaluation-only trials (lm-eval samples, perplexity windows)

Revision ID: 0003_example_outcomes
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003_example_outcomes"
down_revision = "0002"


def upgrade() -> None:
    op.create_table(
        "example_outcomes",
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("metric", sa.String(length=100), nullable=False),
        sa.Column("example_id", sa.String(length=200), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["trial_id"], ["trials.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("trial_id", "metric", "example_id"),
    )


def downgrade() -> None:
    op.drop_table("example_outcomes")
