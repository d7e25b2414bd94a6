"""Server access tokens (only their hashes) and the uploaders' identifiers of tuning sessions.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("sha256", name=op.f("uq_api_tokens_sha256")),
    )
    op.create_table(
        "session_uploads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uid", sa.String(length=64), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("token_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["tuning_sessions.id"],
            name=op.f("fk_session_uploads_session_id_tuning_sessions"),
        ),
        sa.ForeignKeyConstraint(
            ["token_id"], ["api_tokens.id"], name=op.f("fk_session_uploads_token_id_api_tokens")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_session_uploads")),
        sa.UniqueConstraint("session_id", name=op.f("uq_session_uploads_session_id")),
        sa.UniqueConstraint("uid", name=op.f("uq_session_uploads_uid")),
    )
    with op.batch_alter_table("session_uploads", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_session_uploads_token_id"), ["token_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("session_uploads", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_session_uploads_token_id"))

    op.drop_table("session_uploads")
    op.drop_table("api_tokens")
