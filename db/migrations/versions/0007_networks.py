"""Networks: the layers of each model `tune --model` read, so that any ONNX file tuned into a
database has its dashboard page and report without the file.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "networks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("layers", sa.JSON(), nullable=False),
        sa.Column("not_tuned", sa.JSON(), nullable=False),
        sa.Column("left_out", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("digest", name=op.f("uq_networks_digest")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_networks")),
    )


def downgrade() -> None:
    op.drop_table("networks")
