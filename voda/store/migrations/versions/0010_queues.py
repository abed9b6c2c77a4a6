"""Team queues: each job's queue, and the queues administrators set over the API
(docs/design/013-queues.md).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("queue", sa.String(100), nullable=False,
                                   server_default="default"))
    op.create_table(
        "queues",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("entry", sa.JSON(), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("queues")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("queue")
