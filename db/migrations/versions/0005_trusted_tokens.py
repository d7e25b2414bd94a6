"""Trusted tokens: a ``write`` token's uploads no longer answer lookups, a ``trusted`` one's
do. Tokens made before this revision were the only kind that could upload, and their uploads
answered: they become ``trusted`` so that upgrading changes no answer. Make new tuning
machines' tokens ``write`` unless their measurements are to be believed as they come.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("UPDATE api_tokens SET scope = 'trusted' WHERE scope = 'write'")


def downgrade() -> None:
    op.execute("UPDATE api_tokens SET scope = 'write' WHERE scope = 'trusted'")
