"""Trained dictionaries stored compressed: ``zstd_dicts.codec`` says how ``data`` holds the
dictionary, as ``blobs.codec`` does for a payload (0: the dictionary's own bytes, 1: a zstd
frame of them). A trained dictionary is mostly fragments of the samples it was trained on, so
it compresses well (41 KB to 7 KB on the benchmark corpus, about 2.5 % of a 1,000-turn archive).
``size`` and ``digest`` stay those of the dictionary itself. Rows written before this revision
keep their bytes and read as codec 0; nothing is rewritten.

Downgrading stores every compressed dictionary's own bytes again, then drops the column, so the
alpstore that wrote the older schema can read the archive.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
import zstandard

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

CODEC_ZSTD = 1  # alpstore.codec.CODEC_ZSTD, fixed here as the migration wrote it


def upgrade() -> None:
    op.add_column(
        "zstd_dicts",
        sa.Column("codec", sa.SmallInteger(), server_default=sa.text("0"), nullable=False),
    )


def downgrade() -> None:
    conn = op.get_bind()
    rows = conn.execute(
        sa.text("SELECT id, size, data FROM zstd_dicts WHERE codec = :c"), {"c": CODEC_ZSTD}
    ).all()
    dctx = zstandard.ZstdDecompressor()
    for dict_id, size, data in rows:
        conn.execute(
            sa.text("UPDATE zstd_dicts SET data = :d WHERE id = :id"),
            {"d": dctx.decompress(bytes(data), max_output_size=int(size)), "id": int(dict_id)},
        )
    # a plain DROP COLUMN (SQLite >= 3.35), as in 0003
    op.drop_column("zstd_dicts", "codec")
