"""Device extensions: CL_DEVICE_EXTENSIONS, which say whether a device computes in half
precision (cl_khr_fp16), so that a lookup never answers a device with a variant it cannot
build. Devices stored before this
revision report none until a tuning run on them sees them again.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.add_column(sa.Column("extensions", sa.Text(), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("devices") as batch:
        batch.drop_column("extensions")
