"""trials record how many times they resumed from a checkpoint and the steps they recomputed
(issue 39: checkpoints and exact resume)

Revision ID: 0006_trial_resumes
Revises: 0005_suite_run_plan
"""

import sqlalchemy as sa
from alembic import op

revision = "0006_trial_resumes"
down_revision = "0005_suite_run_plan"


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch_op:
        batch_op.add_column(sa.Column("resumes", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(
            sa.Column("recomputed_steps", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch_op:
        batch_op.drop_column("recomputed_steps")
        batch_op.drop_column("resumes")
