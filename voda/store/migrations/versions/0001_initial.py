"""Initial schema: jobs, job history, category speed, scheduler settings, backend state.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("user", sa.String(100), nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("command", sa.Text(), nullable=True),
        sa.Column("image", sa.Text(), nullable=True),
        sa.Column("profile", sa.String(100), nullable=True),
        sa.Column("category", sa.String(200), nullable=False),
        sa.Column("gpu_type", sa.String(100), nullable=False),
        sa.Column("min_workers", sa.Integer(), nullable=False),
        sa.Column("max_workers", sa.Integer(), nullable=False),
        sa.Column("preferred_workers", sa.Integer(), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("epochs", sa.Integer(), nullable=False),
        sa.Column("completed_epochs", sa.Float(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("submit_time", sa.Float(), nullable=False),
        sa.Column("current_workers", sa.Integer(), nullable=False),
        sa.Column("placement", sa.JSON(), nullable=False),
        sa.Column("attained_gpu_seconds", sa.Float(), nullable=False),
        sa.Column("attained_gpu_seconds_since_start", sa.Float(), nullable=False),
        sa.Column("running_seconds", sa.Float(), nullable=False),
        sa.Column("running_seconds_since_start", sa.Float(), nullable=False),
        sa.Column("waiting_seconds", sa.Float(), nullable=False),
        sa.Column("waiting_seconds_since_start", sa.Float(), nullable=False),
        sa.Column("first_start_time", sa.Float(), nullable=True),
        sa.Column("finish_time", sa.Float(), nullable=True),
        sa.Column("queue_since", sa.Float(), nullable=True),
        sa.Column("epoch_time_by_workers", sa.JSON(), nullable=False),
        sa.Column("placement_strategy", sa.String(40), nullable=False),
        sa.Column("preferred_domain", sa.String(200), nullable=True),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("rescales", sa.Integer(), nullable=False),
        sa.Column("migrations", sa.Integer(), nullable=False),
        sa.Column("preemptions", sa.Integer(), nullable=False),
        sa.Column("accounted_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_jobs_user", "jobs", ["user"])
    op.create_index("ix_jobs_gpu_type", "jobs", ["gpu_type"])
    op.create_index("ix_jobs_status", "jobs", ["status"])
    op.create_table(
        "job_history",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job", sa.String(200), nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("field", sa.String(20), nullable=False),
        sa.Column("old", sa.String(40), nullable=True),
        sa.Column("new", sa.String(40), nullable=False),
    )
    op.create_index("ix_job_history_job_id", "job_history", ["job", "id"])
    op.create_table(
        "category_speed",
        sa.Column("category", sa.String(200), primary_key=True),
        sa.Column("workers", sa.Integer(), primary_key=True),
        sa.Column("epoch_seconds", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "scheduler_settings",
        sa.Column("gpu_type", sa.String(100), primary_key=True),
        sa.Column("algorithm", sa.String(200), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("rate_limit_seconds", sa.Float(), nullable=True),
    )
    op.create_table(
        "backend_state",
        sa.Column("name", sa.String(100), primary_key=True),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("backend_state")
    op.drop_table("scheduler_settings")
    op.drop_table("category_speed")
    op.drop_index("ix_job_history_job_id", table_name="job_history")
    op.drop_table("job_history")
    op.drop_index("ix_jobs_status", table_name="jobs")
    op.drop_index("ix_jobs_gpu_type", table_name="jobs")
    op.drop_index("ix_jobs_user", table_name="jobs")
    op.drop_table("jobs")
