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

import threading
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

AHEAD_TRAIN_F = 18
"""fastCover's frequency table of an import's dictionary, 2**18 entries (zstd's default 2**20):
trained from the 1,000-turn benchmark corpus's first frame (400 messages, 192 KB) in 7 ms
instead of 22 ms (CPU), its frames 268,077 bytes instead of 268,427 and the dictionary stored
in 14,890 bytes instead of 14,807: the same size, a third of the time, inside every fresh
import's transaction."""

AHEAD_TRAIN_MIN = 64
"""Fewest messages in an import's first frame to train its dictionary from (fewer: no
dictionary; such an import is a few frames at most)."""


class FramesAhead:
    """One import's frame compressor, chosen at its first frame (see the module).

    ``behind`` (an import that calls :meth:`finish` before its transaction commits): a frame
    is compressed on a thread of its own while the import reads on — zstd releases the
    interpreter lock, and the frames' compression was about a fifth of an import's
    transaction. Its row is written at once with empty data (``SqlArchive.store_packed``: the
    blobs' rows point into it by id) and its data filled in when the thread is done, before
    the next frame is started and at the latest by :meth:`finish`. One frame in flight: memory
    holds one more frame's content.
    """

    def __init__(
        self,
        archive: DictionaryTraining,
        conn: Connection,
        *,
        dict_size: int,
        behind: bool = False,
    ) -> None:
        self._archive = archive
        self._conn = conn
        self._dict_size = dict_size
        self._chosen: tuple[int, int | None, zstandard.ZstdCompressor] | None = None
        self.behind = behind
        self._flight: tuple[int, _Compressing] | None = None

    def compress(self, raws: Sequence[bytes], content: bytes) -> tuple[int, int | None, bytes]:
        """``(codec, dictionary id, frame)`` of ``content`` (the ``raws`` joined)."""
        codec, dict_id = self.choose(raws)
        assert self._chosen is not None
        return codec, dict_id, self._chosen[2].compress(content)

    def choose(self, raws: Sequence[bytes]) -> tuple[int, int | None]:
        """``(codec, dictionary id)`` of the import's frames (chosen at the first)."""
        if self._chosen is None:
            self._chosen = self._choose(raws)
        return self._chosen[0], self._chosen[1]

    def compress_behind(self, frame_id: int, content: bytes) -> None:
        """Compress ``content`` into frame ``frame_id`` (its row written, its data empty) on
        the thread, after the frame before it is filled in (:meth:`choose` first).
        """
        self.fill()
        assert self._chosen is not None
        job = _Compressing(self._chosen[2], content)
        job.start()
        self._flight = (frame_id, job)

    def fill(self) -> None:
        """Write the data of the frame in flight, if any, into its row."""
        if self._flight is None:
            return
        frame_id, job = self._flight
        self._flight = None
        rsql.execute(
            self._conn, "UPDATE pack_frames SET data = ? WHERE id = ?", (job.result(), frame_id)
        )

    def finish(self) -> None:
        """Every frame's data written (call before the import's transaction commits); the
        thread stopped.
        """
        try:
            self.fill()
        finally:
            self.abandon()

    def abandon(self) -> None:
        """After a failure (the import's transaction rolls back): the thread stopped, the
        frame in flight dropped.
        """
        if self._flight is not None:
            self._flight[1].join()
            self._flight = None

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
                data = train_dictionary(raws, self._dict_size, f=AHEAD_TRAIN_F)
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


class _Compressing(threading.Thread):
    """One frame compressed on a thread of its own (a plain thread: ``concurrent.futures``
    would import ``logging`` into every import's process).
    """

    def __init__(self, comp: zstandard.ZstdCompressor, content: bytes) -> None:
        super().__init__(name="alpstore-frame", daemon=True)
        self._comp = comp
        self._content: bytes | None = content
        self._out: bytes | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            assert self._content is not None
            self._out = self._comp.compress(self._content)
        except BaseException as err:  # handed to the importing thread by result()
            self._error = err
        finally:
            self._content = None

    def result(self) -> bytes:
        """The compressed frame (waits for it); the thread's error raised here."""
        self.join()
        if self._error is not None:
            raise self._error
        assert self._out is not None
        return self._out
