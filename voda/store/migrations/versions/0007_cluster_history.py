"""The cluster's history: a sample per GPU type taken every `history_sample_seconds`
(GPUs in service, allocated and in use, jobs running and waiting, how long the waiting
jobs have waited), and the changes of each node (drained, back in service, added,
removed). Both are kept for `history_days` and deleted after.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cluster_samples",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("gpu_type", sa.String(100), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("allocated", sa.Integer(), nullable=False),
        sa.Column("in_use", sa.Integer(), nullable=False),
        sa.Column("running", sa.Integer(), nullable=False),
        sa.Column("waiting", sa.Integer(), nullable=False),
        sa.Column("wait_mean_seconds", sa.Float(), nullable=False),
        sa.Column("wait_max_seconds", sa.Float(), nullable=False),
    )
    op.create_index("ix_cluster_samples_type_time", "cluster_samples", ["gpu_type", "time"])
    op.create_index("ix_cluster_samples_time", "cluster_samples", ["time"])
    op.create_table(
        "node_events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("node", sa.String(200), nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
    )
    op.create_index("ix_node_events_node_id", "node_events", ["node", "id"])
    op.create_index("ix_node_events_time", "node_events", ["time"])


def downgrade() -> None:
    op.drop_table("node_events")
    op.drop_table("cluster_samples")
