"""Delta blobs: ``blobs.base_id`` names the blob whose bytes a codec-3 payload is a zstd delta
against (large tool outputs that repeat a file read before). A plain column: a base is never a
delta itself, and GC keeps every live delta's base.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("blobs", sa.Column("base_id", sa.Integer(), nullable=True))


def downgrade() -> None:
    # a plain DROP COLUMN (SQLite >= 3.35): a batch rebuild of ``blobs`` would break the SQL
    # views that read it (session_summary) while the table is renamed
    op.drop_column("blobs", "base_id")
