"""Initial schema: devices, kernel versions, workloads, tuning sessions, measurements.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "devices",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("fingerprint", sa.String(length=16), nullable=False),
        sa.Column("platform_name", sa.String(length=255), nullable=False),
        sa.Column("platform_version", sa.String(length=255), nullable=False),
        sa.Column("vendor", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("driver_version", sa.String(length=255), nullable=False),
        sa.Column("compute_units", sa.Integer(), nullable=False),
        sa.Column("max_work_group_size", sa.BigInteger(), nullable=False),
        sa.Column("local_mem_size", sa.BigInteger(), nullable=False),
        sa.Column("global_mem_size", sa.BigInteger(), nullable=False),
        sa.Column("device_type", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_devices")),
        sa.UniqueConstraint("fingerprint", name=op.f("uq_devices_fingerprint")),
    )
    op.create_table(
        "kernel_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("template_source", sa.Text(), nullable=False),
        sa.Column("space_source", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kernel_versions")),
        sa.UniqueConstraint("name", "sha256", name=op.f("uq_kernel_versions_name_sha256")),
    )
    op.create_table(
        "workloads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("problem", sa.String(length=64), nullable=False),
        sa.Column("key", sa.String(length=512), nullable=False),
        sa.Column("shape", sa.JSON(), nullable=False),
        sa.Column("dtype", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workloads")),
        sa.UniqueConstraint("key", name=op.f("uq_workloads_key")),
    )
    op.create_table(
        "tuning_sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("kernel_version_id", sa.Integer(), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("strategy", sa.String(length=64), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=True),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("octune_version", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["device_id"], ["devices.id"], name=op.f("fk_tuning_sessions_device_id_devices")
        ),
        sa.ForeignKeyConstraint(
            ["kernel_version_id"],
            ["kernel_versions.id"],
            name=op.f("fk_tuning_sessions_kernel_version_id_kernel_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["workloads.id"], name=op.f("fk_tuning_sessions_workload_id_workloads")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tuning_sessions")),
    )
    op.create_index(
        op.f("ix_tuning_sessions_device_id"), "tuning_sessions", ["device_id"], unique=False
    )
    op.create_index(
        op.f("ix_tuning_sessions_kernel_version_id"),
        "tuning_sessions",
        ["kernel_version_id"],
        unique=False,
    )
    op.create_index(
        op.f("ix_tuning_sessions_workload_id"), "tuning_sessions", ["workload_id"], unique=False
    )
    op.create_table(
        "measurements",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("config_key", sa.String(length=1024), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("median_s", sa.Double(), nullable=True),
        sa.Column("spread_s", sa.Double(), nullable=True),
        sa.Column("times_s", sa.JSON(), nullable=False),
        sa.Column("flops", sa.BigInteger(), nullable=False),
        sa.Column("gflops", sa.Double(), nullable=True),
        sa.Column("max_error", sa.Double(), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["tuning_sessions.id"],
            name=op.f("fk_measurements_session_id_tuning_sessions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_measurements")),
    )
    op.create_index(
        op.f("ix_measurements_config_key"), "measurements", ["config_key"], unique=False
    )
    op.create_index(
        op.f("ix_measurements_session_id"), "measurements", ["session_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_measurements_session_id"), table_name="measurements")
    op.drop_index(op.f("ix_measurements_config_key"), table_name="measurements")
    op.drop_table("measurements")
    op.drop_index(op.f("ix_tuning_sessions_workload_id"), table_name="tuning_sessions")
    op.drop_index(op.f("ix_tuning_sessions_kernel_version_id"), table_name="tuning_sessions")
    op.drop_index(op.f("ix_tuning_sessions_device_id"), table_name="tuning_sessions")
    op.drop_table("tuning_sessions")
    op.drop_table("workloads")
    op.drop_table("kernel_versions")
    op.drop_table("devices")
