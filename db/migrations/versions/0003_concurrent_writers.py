"""Many writers at once: a config once per session, sessions that many writers share by name
(``origin``), and claims that keep concurrent tuners from measuring one config twice.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Repeats of one config in one session are copies that racing uploads stored before this
    # index existed: keep the first of each.
    op.execute(
        "DELETE FROM measurements WHERE id NOT IN "
        "(SELECT MIN(id) FROM measurements GROUP BY session_id, config_key)"
    )
    op.create_index(
        "uq_measurements_session_id_config_key",
        "measurements",
        ["session_id", "config_key"],
        unique=True,
    )
    op.add_column("tuning_sessions", sa.Column("origin", sa.String(length=100), nullable=True))
    op.create_index("uq_tuning_sessions_origin", "tuning_sessions", ["origin"], unique=True)
    op.create_table(
        "config_claims",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("device_id", sa.Integer(), nullable=False),
        sa.Column("kernel_version_id", sa.Integer(), nullable=False),
        sa.Column("workload_id", sa.Integer(), nullable=False),
        sa.Column("config_key", sa.String(length=1024), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["device_id"], ["devices.id"], name=op.f("fk_config_claims_device_id_devices")
        ),
        sa.ForeignKeyConstraint(
            ["kernel_version_id"],
            ["kernel_versions.id"],
            name=op.f("fk_config_claims_kernel_version_id_kernel_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["workload_id"], ["workloads.id"], name=op.f("fk_config_claims_workload_id_workloads")
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["tuning_sessions.id"],
            name=op.f("fk_config_claims_session_id_tuning_sessions"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_config_claims")),
        sa.UniqueConstraint(
            "device_id",
            "kernel_version_id",
            "workload_id",
            "config_key",
            name="uq_config_claims_config",
        ),
    )
    op.create_index(op.f("ix_config_claims_session_id"), "config_claims", ["session_id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_config_claims_session_id"), table_name="config_claims")
    op.drop_table("config_claims")
    op.drop_index("uq_tuning_sessions_origin", table_name="tuning_sessions")
    with op.batch_alter_table("tuning_sessions") as batch_op:
        batch_op.drop_column("origin")
    op.drop_index("uq_measurements_session_id_config_key", table_name="measurements")
