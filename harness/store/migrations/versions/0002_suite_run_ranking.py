"""suite runs record how their suite is ranked (baseline, metric, alpha, target)

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    with op.batch_alter_table("suite_runs") as batch_op:
        batch_op.add_column(sa.Column("ranking", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("suite_runs") as batch_op:
        batch_op.drop_column("ranking")
