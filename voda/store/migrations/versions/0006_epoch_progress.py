"""How far into its current epoch each job has run, and on how many GPUs: the seconds and
GPU-seconds since its last epoch ended (JobRecord.running_seconds_since_epoch,
attained_gpu_seconds_since_epoch).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for column in ("running_seconds_since_epoch", "attained_gpu_seconds_since_epoch"):
            batch.add_column(sa.Column(column, sa.Float(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("attained_gpu_seconds_since_epoch")
        batch.drop_column("running_seconds_since_epoch")
