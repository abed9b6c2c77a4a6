"""Team queues' history: per queue and GPU type, a sample taken with the cluster's
(GPUs held, guarantee, borrowed, lent, jobs waiting, borrowing limit), kept for
`history_days` like them (docs/design/013-queues.md).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "queue_samples",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("gpu_type", sa.String(100), nullable=False),
        sa.Column("queue", sa.String(100), nullable=False),
        sa.Column("used", sa.Integer(), nullable=False),
        sa.Column("guarantee", sa.Integer(), nullable=False),
        sa.Column("borrowed", sa.Integer(), nullable=False),
        sa.Column("lent", sa.Integer(), nullable=False),
        sa.Column("waiting", sa.Integer(), nullable=False),
        sa.Column("borrowing_limit", sa.Integer(), nullable=True),
    )
    op.create_index("ix_queue_samples_queue_type_time", "queue_samples",
                    ["queue", "gpu_type", "time"])
    op.create_index("ix_queue_samples_time", "queue_samples", ["time"])


def downgrade() -> None:
    op.drop_table("queue_samples")
