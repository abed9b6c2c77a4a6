"""Speed and layout history keyed by (category, GPU type); Tiresias counters since promotion.

Existing history rows go to the default GPU type; existing jobs start their
"since promotion" counters from what they attained in total (no job was ever
promoted under the old counters' meaning: their queue now follows total service).
Stored algorithm settings lose the knobs that are gone (Tiresias's `service`, the
FfDL `horizon_factor`).

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
# Each history table: its integer key columns after `category`, and its value column.
HISTORY_TABLES = {
    "category_speed": (["workers"], "epoch_seconds"),
    "category_layout": (["workers", "nodes"], "samples_per_second"),
}
# Knobs removed from the algorithms, by algorithm.
GONE_KNOBS = {"Tiresias": ("service",), "ElasticTiresias": ("service",),
              "FfDLOptimizer": ("horizon_factor",)}
PROMOTION_COUNTERS = (
    ("attained_gpu_seconds_since_promotion", "attained_gpu_seconds"),
    ("running_seconds_since_promotion", "running_seconds"),
)


def _rebuild(table: str, with_gpu_type: bool) -> None:
    """Copy `table` into a new one keyed with (or without) gpu_type, then swap them."""
    key_names, value = HISTORY_TABLES[table]
    columns = [sa.Column("category", sa.String(200), nullable=False)]
    if with_gpu_type:
        columns.append(sa.Column("gpu_type", sa.String(100), nullable=False))
    columns += [sa.Column(name, sa.Integer(), nullable=False) for name in key_names]
    columns += [sa.Column(value, sa.Float(), nullable=False),
                sa.Column("updated_at", sa.Float(), nullable=False)]
    primary = ["category", *(["gpu_type"] if with_gpu_type else []), *key_names]
    new = f"{table}_new"
    op.create_table(new, *columns,
                    sa.PrimaryKeyConstraint(*primary, name=f"pk_{table}_{len(primary)}"))
    copied = ["category", *key_names, value, "updated_at"]
    source = ", ".join(copied)
    if with_gpu_type:
        op.execute(sa.text(
            f"INSERT INTO {new} (gpu_type, {source}) SELECT :t, {source} FROM {table}"
        ).bindparams(t=DEFAULT_GPU_TYPE))
    else:  # back to one row per category: the default GPU type's rows are kept
        op.execute(sa.text(
            f"INSERT INTO {new} ({source}) SELECT {source} FROM {table} WHERE gpu_type = :t"
        ).bindparams(t=DEFAULT_GPU_TYPE))
    op.drop_table(table)
    op.rename_table(new, table)


def upgrade() -> None:
    for table in HISTORY_TABLES:
        _rebuild(table, with_gpu_type=True)
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
    _drop_gone_knobs()


def _drop_gone_knobs() -> None:
    settings = sa.table("scheduler_settings", sa.column("gpu_type", sa.String()),
                        sa.column("algorithm", sa.String()), sa.column("params", sa.JSON()))
    connection = op.get_bind()
    for gpu_type, algorithm, params in connection.execute(
            sa.select(settings.c.gpu_type, settings.c.algorithm, settings.c.params)).all():
        gone = [k for k in GONE_KNOBS.get(algorithm, ()) if k in (params or {})]
        if gone:
            kept = {k: v for k, v in params.items() if k not in gone}
            connection.execute(settings.update().where(settings.c.gpu_type == gpu_type)
                               .values(params=kept))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for column in ("promotions", "waiting_seconds_since_promotion",
                       *(new for new, _ in PROMOTION_COUNTERS)):
            batch.drop_column(column)
    for table in HISTORY_TABLES:
        _rebuild(table, with_gpu_type=False)
