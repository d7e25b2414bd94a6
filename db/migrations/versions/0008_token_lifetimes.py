"""Token lifetimes: a token can be revoked, can expire, and records when it was last used.
Every existing token keeps working: none is revoked and none expires.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("expires_at", "revoked_at", "last_used_at")


def upgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_tokens") as batch:
        for name in COLUMNS:
            batch.drop_column(name)
