"""Category layout throughput: samples per second by (workers, nodes spanned).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "category_layout",
        sa.Column("category", sa.String(200), primary_key=True),
        sa.Column("workers", sa.Integer(), primary_key=True),
        sa.Column("nodes", sa.Integer(), primary_key=True),
        sa.Column("samples_per_second", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("category_layout")
