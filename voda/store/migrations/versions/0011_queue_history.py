"""0011, after 0010: team queues' history. Per queue and GPU type, a sample taken with the
cluster's (GPUs held, guarantee, borrowed, lent, jobs waiting; the borrowing limit, null
while unlimited), kept for `history_days` like them (docs/design/013-queues.md)."""

import sqlalchemy as sa
from alembic import op

revision, down_revision = "0011", "0010"
branch_labels = depends_on = None

COUNTS = ("used", "guarantee", "borrowed", "lent", "waiting")


def upgrade() -> None:
    op.create_table(
        "queue_samples",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("time", sa.Float(), nullable=False),
        *(sa.Column(name, sa.String(100), nullable=False) for name in ("gpu_type", "queue")),
        *(sa.Column(name, sa.Integer(), nullable=False) for name in COUNTS),
        sa.Column("borrowing_limit", sa.Integer(), nullable=True),
    )
    op.create_index("ix_queue_samples_queue_type_time", "queue_samples",
                    ["queue", "gpu_type", "time"])
    op.create_index("ix_queue_samples_time", "queue_samples", ["time"])


def downgrade() -> None:
    op.drop_table("queue_samples")
