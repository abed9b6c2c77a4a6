"""Goodput models: the one each job reported last, and each category's best-measured one.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("goodput", sa.JSON(), nullable=True))
    op.create_table(
        "category_goodput",
        sa.Column("category", sa.String(200), nullable=False),
        sa.Column("gpu_type", sa.String(100), nullable=False),
        sa.Column("model", sa.JSON(), nullable=False),
        sa.Column("measured_gpus", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("category", "gpu_type", name="pk_category_goodput"),
    )


def downgrade() -> None:
    op.drop_table("category_goodput")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("goodput")
