"""Speed and layout history keyed by (category, GPU type); Tiresias counters since promotion.

Existing history rows go to the default GPU type; existing jobs start their
"since promotion" counters from what they attained in total (no job was ever
promoted under the old counters' meaning: their queue now follows total service).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

DEFAULT_GPU_TYPE = "default"
HISTORY_KEYS = {
    "category_speed": ["category", "gpu_type", "workers"],
    "category_layout": ["category", "gpu_type", "workers", "nodes"],
}
PROMOTION_COUNTERS = (
    ("attained_gpu_seconds_since_promotion", "attained_gpu_seconds"),
    ("running_seconds_since_promotion", "running_seconds"),
)


def upgrade() -> None:
    for table, keys in HISTORY_KEYS.items():
        with op.batch_alter_table(table, recreate="always") as batch:
            batch.add_column(sa.Column("gpu_type", sa.String(100), nullable=False,
                                       server_default=DEFAULT_GPU_TYPE))
            batch.create_primary_key(f"pk_{table}", keys)
    with op.batch_alter_table("jobs") as batch:
        for column, _ in PROMOTION_COUNTERS:
            batch.add_column(sa.Column(column, sa.Float(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("waiting_seconds_since_promotion", sa.Float(),
                                   nullable=False, server_default="0"))
        batch.add_column(sa.Column("promotions", sa.Integer(), nullable=False,
                                   server_default="0"))
    jobs = sa.table("jobs", *(sa.column(name, sa.Float()) for pair in PROMOTION_COUNTERS
                              for name in pair))
    op.execute(jobs.update().values({new: jobs.c[old] for new, old in PROMOTION_COUNTERS}))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for column in ("promotions", "waiting_seconds_since_promotion",
                       *(new for new, _ in PROMOTION_COUNTERS)):
            batch.drop_column(column)
    for table, keys in HISTORY_KEYS.items():
        # Back to one row per category: the default GPU type's rows are kept.
        op.execute(sa.text(f"DELETE FROM {table} WHERE gpu_type <> :t").bindparams(
            t=DEFAULT_GPU_TYPE))
        with op.batch_alter_table(table, recreate="always") as batch:
            batch.create_primary_key(f"pk_{table}", [k for k in keys if k != "gpu_type"])
            batch.drop_column("gpu_type")
