"""A trained dictionary for the LangGraph saver's closed turns: ``zstd_dicts.purpose`` (issue 42).

A closed turn's document (``lg_turns.doc``, 0011: its steps' states and pending writes) was
compressed against the fixed :data:`alpstore.archive.lgstate.STATE_DICTIONARY` (codec 10): at
1,000 turns of a tool loop ~840 bytes a turn, 0.28× of the raw conversation. Once an archive
holds enough of them, the saver trains a dictionary on its own turns and compresses the next
ones against it (codec 11): ~580 bytes. That dictionary is a ``zstd_dicts`` row like the blob
store's, told apart by the new column ``purpose`` (0: the blob store's, 1: LangGraph turns):
the blob store picks its newest dictionary of purpose 0, never the saver's.

Upgrade: the column, 0 for every existing row.
Downgrade: every codec-11 turn document re-compressed against the fixed dictionary (codec 10),
the purpose-1 rows deleted, the column dropped: the schema before knows neither.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
import zstandard

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_CODEC_LG_DICT = 10
_CODEC_LG_TRAINED = 11
_CODEC_RAW = 0
_DICT_CODEC_ZSTD = 1


def upgrade() -> None:
    op.add_column(
        "zstd_dicts",
        sa.Column("purpose", sa.SmallInteger(), nullable=False, server_default=sa.text("0")),
    )


def downgrade() -> None:
    from alpstore.archive.lgstate import STATE_DICTIONARY  # fixed: a new one needs a new codec

    conn = op.get_bind()
    trained: dict[int, zstandard.ZstdDecompressor] = {}
    for dict_id, codec, data in conn.exec_driver_sql(
        "SELECT id, codec, data FROM zstd_dicts WHERE purpose = 1"
    ):
        raw = bytes(data)
        if int(codec) == _DICT_CODEC_ZSTD:
            raw = zstandard.ZstdDecompressor().decompress(raw)
        trained[int(dict_id)] = zstandard.ZstdDecompressor(
            dict_data=zstandard.ZstdCompressionDict(raw)
        )
    fixed = zstandard.ZstdCompressionDict(
        STATE_DICTIONARY, dict_type=zstandard.DICT_TYPE_RAWCONTENT
    )
    compressor = zstandard.ZstdCompressor(
        level=3,
        dict_data=fixed,
        write_content_size=False,
        write_checksum=False,
        write_dict_id=False,
    )
    rows = conn.exec_driver_sql(
        f"SELECT id, dict_id, raw_size, doc FROM lg_turns WHERE codec = {_CODEC_LG_TRAINED}"
    ).fetchall()
    for turn_id, dict_id, size, doc in rows:
        raw = trained[int(dict_id)].decompress(bytes(doc), max_output_size=int(size))
        payload = compressor.compress(raw)
        codec = _CODEC_LG_DICT
        if len(payload) >= len(raw):
            codec, payload = _CODEC_RAW, raw
        conn.execute(
            sa.text(
                "UPDATE lg_turns SET codec = :codec, dict_id = NULL, doc = :doc WHERE id = :id"
            ),
            {"codec": codec, "doc": payload, "id": int(turn_id)},
        )
    conn.exec_driver_sql("DELETE FROM zstd_dicts WHERE purpose = 1")
    # SQLite 3.35+ drops a column in place (nothing indexes it)
    conn.exec_driver_sql("ALTER TABLE zstd_dicts DROP COLUMN purpose")
