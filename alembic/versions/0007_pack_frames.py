"""Pack frames (issue 33): ``pack_frames`` holds cold blobs rewritten, in conversation order,
into zstd frames of a few tens of KB; a packed blob keeps its row (its digest, kind and size, so
content addressing and every reference are unchanged) with ``codec`` 4 and, as ``payload``, a
pointer (frame id, offset: two varints) into its frame's content. Nothing is packed by the
migration itself (``alpstore archive pack`` and the end of an import do it).

PostgreSQL: the columns holding bytes that are zstd frames already (``pack_frames.data``,
``blobs.payload``, ``zstd_dicts.data``) are ``STORAGE EXTERNAL``: TOAST stores them out of line
without trying to compress them again.

Downgrading stores every packed blob loose again (zstd level 3, no dictionary), then drops the
table, so the alpstore that wrote the older schema reads the archive.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
import zstandard

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

CODEC_ZSTD = 1  # alpstore.codec's values, fixed here as the migration wrote them
CODEC_ZSTD_DICT = 2
CODEC_PACKED = 4
EXTERNAL = (("pack_frames", "data"), ("blobs", "payload"), ("zstd_dicts", "data"))


def upgrade() -> None:
    op.create_table(
        "pack_frames",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.LargeBinary(length=32), nullable=False),
        sa.Column("codec", sa.SmallInteger(), nullable=False),
        sa.Column("dict_id", sa.Integer(), nullable=True),
        sa.Column("raw_size", sa.Integer(), nullable=False),
        sa.Column("blob_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dict_id"], ["zstd_dicts.id"], name="fk_pack_frames_dict_id_zstd_dicts"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_pack_frames"),
        comment="Pack frames (0007): cold blobs rewritten in conversation order into one zstd "
        "frame; a packed blob (codec 4) points at (frame, offset) and holds raw_size bytes of it.",
        sqlite_autoincrement=True,
    )
    if op.get_bind().dialect.name == "postgresql":
        for table, column in EXTERNAL:
            op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET STORAGE EXTERNAL")


def _varints(data: bytes) -> list[int]:
    out, value, shift = [], 0, 0
    for byte in data:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            out.append(value)
            value = shift = 0
    return out


def downgrade() -> None:
    conn = op.get_bind()
    dicts: dict[int, bytes] = {}
    for dict_id, codec, size, data in conn.execute(
        sa.text("SELECT id, codec, size, data FROM zstd_dicts")
    ):
        raw = bytes(data)
        if int(codec) == CODEC_ZSTD:
            raw = zstandard.ZstdDecompressor().decompress(raw, max_output_size=int(size))
        dicts[int(dict_id)] = raw
    members: dict[int, list[tuple[int, int, int]]] = {}
    for blob_id, raw_size, payload in conn.execute(
        sa.text("SELECT id, raw_size, payload FROM blobs WHERE codec = :c"), {"c": CODEC_PACKED}
    ).all():
        frame_id, offset = _varints(bytes(payload))[:2]
        members.setdefault(frame_id, []).append((int(blob_id), offset, int(raw_size)))
    comp = zstandard.ZstdCompressor(level=3)
    for frame_id, codec, dict_id, size, data in conn.execute(
        sa.text("SELECT id, codec, dict_id, raw_size, data FROM pack_frames")
    ).all():
        if int(codec) == CODEC_ZSTD_DICT:
            dctx = zstandard.ZstdDecompressor(
                dict_data=zstandard.ZstdCompressionDict(dicts[int(dict_id)])
            )
        else:
            dctx = zstandard.ZstdDecompressor()
        content = dctx.decompress(bytes(data), max_output_size=int(size))
        for blob_id, offset, raw_size in members.get(int(frame_id), []):
            conn.execute(
                sa.text("UPDATE blobs SET codec = :c, dict_id = NULL, payload = :p WHERE id = :id"),
                {
                    "c": CODEC_ZSTD,
                    "p": comp.compress(content[offset : offset + raw_size]),
                    "id": blob_id,
                },
            )
    op.drop_table("pack_frames")
