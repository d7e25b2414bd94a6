"""The tuning farm: job submissions, the jobs agents lease for one device each, the agents
and their devices, and which uploaded sessions belong to which job.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "farm_agents",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["token_id"], ["api_tokens.id"], name=op.f("fk_farm_agents_token_id_api_tokens")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_farm_agents")),
    )
    with op.batch_alter_table("farm_agents", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_farm_agents_token_id"), ["token_id"], unique=False)

    op.create_table(
        "job_submissions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("devices", sa.String(length=255), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("strategy", sa.String(length=64), nullable=False),
        sa.Column("budget_seconds", sa.Double(), nullable=True),
        sa.Column("budget_candidates", sa.Integer(), nullable=True),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["token_id"], ["api_tokens.id"], name=op.f("fk_job_submissions_token_id_api_tokens")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_submissions")),
    )
    with op.batch_alter_table("job_submissions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_job_submissions_token_id"), ["token_id"], unique=False)

    op.create_table(
        "farm_agent_devices",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("agent_id", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["farm_agents.id"],
            name=op.f("fk_farm_agent_devices_agent_id_farm_agents"),
        ),
        sa.ForeignKeyConstraint(
            ["device_id"], ["devices.id"], name=op.f("fk_farm_agent_devices_device_id_devices")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_farm_agent_devices")),
        sa.UniqueConstraint(
            "agent_id", "device_id", name=op.f("uq_farm_agent_devices_agent_id_device_id")
        ),
    )
    with op.batch_alter_table("farm_agent_devices", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_farm_agent_devices_device_id"), ["device_id"], unique=False
        )

    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("lease_epoch", sa.Integer(), nullable=False),
        sa.Column("lease_agent_id", sa.Integer(), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("tried_s", sa.Double(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["device_id"], ["devices.id"], name=op.f("fk_jobs_device_id_devices")
        ),
        sa.ForeignKeyConstraint(
            ["lease_agent_id"], ["farm_agents.id"], name=op.f("fk_jobs_lease_agent_id_farm_agents")
        ),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["job_submissions.id"],
            name=op.f("fk_jobs_submission_id_job_submissions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint(
            "submission_id", "device_id", name=op.f("uq_jobs_submission_id_device_id")
        ),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index("ix_jobs_status_device_id", ["status", "device_id"], unique=False)

    op.create_table(
        "job_sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_job_sessions_job_id_jobs")),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["tuning_sessions.id"],
            name=op.f("fk_job_sessions_session_id_tuning_sessions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_sessions")),
        sa.UniqueConstraint("session_id", name=op.f("uq_job_sessions_session_id")),
    )
    with op.batch_alter_table("job_sessions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_job_sessions_job_id"), ["job_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("job_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_job_sessions_job_id"))

    op.drop_table("job_sessions")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_status_device_id")

    op.drop_table("jobs")
    with op.batch_alter_table("farm_agent_devices", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_farm_agent_devices_device_id"))

    op.drop_table("farm_agent_devices")
    with op.batch_alter_table("job_submissions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_job_submissions_token_id"))

    op.drop_table("job_submissions")
    with op.batch_alter_table("farm_agents", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_farm_agents_token_id"))

    op.drop_table("farm_agents")
