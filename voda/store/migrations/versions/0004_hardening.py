"""Idempotency keys of submissions, event messages, run-time node changes, a write probe.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("idempotency_key", sa.String(200), nullable=True))
        batch.add_column(sa.Column("request_hash", sa.String(64), nullable=True))
        batch.create_index("ux_jobs_user_idempotency_key", ["user", "idempotency_key"],
                           unique=True)
    with op.batch_alter_table("job_history") as batch:
        batch.add_column(sa.Column("message", sa.Text(), nullable=True))
    op.create_table(
        "nodes",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpu_type", sa.String(100), nullable=False),
        sa.Column("leaf", sa.String(200), nullable=True),
        sa.Column("spine", sa.String(200), nullable=True),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "service_state",
        sa.Column("key", sa.String(100), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("service_state")
    op.drop_table("nodes")
    with op.batch_alter_table("job_history") as batch:
        batch.drop_column("message")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ux_jobs_user_idempotency_key")
        batch.drop_column("request_hash")
        batch.drop_column("idempotency_key")
