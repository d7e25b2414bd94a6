"""A config once per session, and sessions that many writers share by name (``origin``).

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


def downgrade() -> None:
    op.drop_index("uq_tuning_sessions_origin", table_name="tuning_sessions")
    with op.batch_alter_table("tuning_sessions") as batch_op:
        batch_op.drop_column("origin")
    op.drop_index("uq_measurements_session_id_config_key", table_name="measurements")
