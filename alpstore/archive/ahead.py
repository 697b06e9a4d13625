"""An import's frames, compressed once as it writes them (issue 41).

An import knows its messages before its turns refer to them, so it stores them packed from the
start (``SqlArchive.store_packed``, called by ``importers.import_history`` a frame's worth at a
time), never loose first and packed again by the settle. ``FramesAhead`` is what one import's
frames share: one zstd compressor at :data:`AHEAD_LEVEL`, with a dictionary.

The dictionary: the archive's own when it has one (the newest, also one an earlier import
committed: a folder of transcripts shares one); otherwise one trained from the first frame's
messages (at least :data:`AHEAD_TRAIN_MIN` of them; about 20 ms for 400) and inserted in the
import's own transaction, so a refused import leaves no dictionary either. The archive does not
switch its loose blobs to it until a later process loads it (the newest dictionary) — nothing is
cached under its id before it commits, so a rolled-back id handed out again cannot be confused
with it.

Why level 9 with a dictionary: on the 1,000-turn benchmark corpus (3.0 MB, 192 KB frames) zstd
level 15 without one took 0.69 s for 256 KB of frames (0.293x raw on disk after the import),
level 9 with a dictionary from the first frame 0.06–0.10 s for 268 KB plus a 12.5 KB
dictionary; the file compacted after the import (``settle(compact=True)``) ends below 0.30x.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import zstandard

from alpstore.codec import (
    CODEC_ZSTD,
    CODEC_ZSTD_DICT,
    digest_dictionary,
    train_dictionary,
)
from alpstore.db import raw as rsql
from alpstore.errors import UsageError

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from alpstore.archive.training import DictionaryTraining

AHEAD_LEVEL = 9
"""zstd level of an import's frames (see the module's docstring)."""

AHEAD_TRAIN_MIN = 64
"""Fewest messages in an import's first frame to train its dictionary from (fewer: no
dictionary; such an import is a few frames at most)."""


class FramesAhead:
    """One import's frame compressor, chosen at its first frame (see the module)."""

    def __init__(self, archive: DictionaryTraining, conn: Connection, *, dict_size: int) -> None:
        self._archive = archive
        self._conn = conn
        self._dict_size = dict_size
        self._chosen: tuple[int, int | None, zstandard.ZstdCompressor] | None = None

    def compress(self, raws: Sequence[bytes], content: bytes) -> tuple[int, int | None, bytes]:
        """``(codec, dictionary id, frame)`` of ``content`` (the ``raws`` joined)."""
        if self._chosen is None:
            self._chosen = self._choose(raws)
        codec, dict_id, comp = self._chosen
        return codec, dict_id, comp.compress(content)

    def _choose(self, raws: Sequence[bytes]) -> tuple[int, int | None, zstandard.ZstdCompressor]:
        archive = self._archive
        dict_id = archive.dictionary_id
        if dict_id is None:  # one an earlier import of this process (or another) committed
            row = rsql.fetchone(self._conn, "SELECT id FROM zstd_dicts ORDER BY id DESC LIMIT 1")
            if row is not None:
                dict_id = int(row[0])
                archive._ensure_dictionary(self._conn, dict_id)
        data: bytes | None = None
        if dict_id is not None:
            data = archive._dec.dictionary(dict_id)
        elif archive.auto_train and len(raws) >= AHEAD_TRAIN_MIN:
            try:
                data = train_dictionary(raws, self._dict_size)
            except UsageError:  # too uniform to learn from: frames without one
                data = None
            if data is not None:
                dict_id = self._insert_dictionary(data, len(raws))
        if data is None or dict_id is None:
            return CODEC_ZSTD, None, zstandard.ZstdCompressor(level=AHEAD_LEVEL)
        # digested once for the level (zstd's CDict): undigested, every frame's compression
        # would load the dictionary again (10-20 ms a frame for a 112 KB one)
        digested = digest_dictionary(data, AHEAD_LEVEL)
        return (
            CODEC_ZSTD_DICT,
            dict_id,
            zstandard.ZstdCompressor(level=AHEAD_LEVEL, dict_data=digested),
        )

    def _insert_dictionary(self, data: bytes, samples: int) -> int:
        """The dictionary's row, in the import's transaction (the same bytes stored before:
        that row), stored at :data:`AHEAD_LEVEL` like the frames: level 19
        (``DICT_STORE_LEVEL``, the background trainer's) took 50-180 ms for the 112 KB
        dictionary of the 1,000-turn benchmark corpus, inside the import (13.6 KB); level 9
        takes about 2 ms (16.1 KB).
        """
        return int(
            self._archive._store_dictionary_row(self._conn, data, samples, level=AHEAD_LEVEL)
        )
