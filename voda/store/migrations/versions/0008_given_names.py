"""Job names as given: `jobs.given_name`, unique among the jobs that have not finished.

Until now every job was renamed NAME-YYYYMMDDhhmmss-xxxxxx and known only by that name,
which stays its uid (`jobs.name`). Jobs stored before keep that generated name as their
name too, so what found them before still finds them, and no two live ones can share it.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

LIVE_ONLY = sa.text("status NOT IN ('Completed', 'Failed', 'Canceled')")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("given_name", sa.String(200), nullable=True))
    op.execute("UPDATE jobs SET given_name = name")
    with op.batch_alter_table("jobs") as batch:
        batch.alter_column("given_name", existing_type=sa.String(200), nullable=False)
        batch.create_index("ix_jobs_given_name", ["given_name"])
        batch.create_index("ux_jobs_live_given_name", ["given_name"], unique=True,
                           sqlite_where=LIVE_ONLY, postgresql_where=LIVE_ONLY)


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ux_jobs_live_given_name")
        batch.drop_index("ix_jobs_given_name")
        batch.drop_column("given_name")
