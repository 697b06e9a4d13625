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
    pack_dictionary,
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
    transaction. Its row is written at once with empty data (``SqlArchive.store_packed``: a
    later frame's lookup finds its members by digest) and its data filled in when the thread
    is done, before the next frame's row is inserted and at the latest by :meth:`finish`. One
    frame in flight: memory holds one more frame's content.

    Filled in *before* the next row, not after it (issue 42): the row's page then still has
    room for its new version, so PostgreSQL updates it in place (a HOT update) and the GIN over
    its digests gets no second entry per member. Filled in after the next row was inserted,
    the new version rarely fitted (2 of 30 frames of a 2,000-turn import were HOT): each other
    frame's ~400 digest keys went into the GIN again, whose pages stayed split after VACUUM
    removed them — 0.101x of each further raw byte instead of 0.069x (RESULTS.md).
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
        self._training: list[bytes] | int | None = None
        """While the first frame's thread trains the dictionary (``choose``): that frame's
        messages until the thread has them, then their count (the thread drops them once it
        has trained: memory holds no more than the frame in flight)."""

    def compress(self, raws: Sequence[bytes], content: bytes) -> tuple[int, int | None, bytes]:
        """``(codec, dictionary id, frame)`` of ``content`` (the ``raws`` joined)."""
        codec, dict_id = self.choose(raws)
        assert self._chosen is not None
        return codec, dict_id, self._chosen[2].compress(content)

    def choose(self, raws: Sequence[bytes]) -> tuple[int, int | None]:
        """``(codec, dictionary id)`` of the import's frames (chosen at the first).

        Behind, a dictionary trained from the first frame is trained on the frame's thread
        (:meth:`compress_behind`): until that thread is done the first frame's row says
        :data:`~alpstore.codec.CODEC_ZSTD` without a dictionary, and :meth:`fill` writes its
        codec and dictionary with its data. A later frame's choice waits for it.
        """
        if self._chosen is None:
            if self._training is not None:  # the first frame's thread trains: its outcome
                self.fill()
            else:
                train = self.behind and self._must_train(raws)
                if train:
                    self._training = list(raws)
                    return CODEC_ZSTD, None
                self._chosen = self._choose(raws)
        assert self._chosen is not None
        return self._chosen[0], self._chosen[1]

    def compress_behind(self, frame_id: int, content: bytes) -> None:
        """Compress ``content`` into frame ``frame_id`` (its row written, its data empty) on
        the thread, after the frame before it is filled in (:meth:`choose` first; the caller
        fills it in before it inserts the row, see the class).
        """
        self.fill()
        if self._chosen is None:  # the first frame: its thread trains the dictionary first
            assert isinstance(self._training, list)
            job = _Compressing(None, content, train=(self._training, self._dict_size))
            self._training = len(self._training)
        else:
            job = _Compressing(self._chosen[2], content)
        job.start()
        self._flight = (frame_id, job)

    def fill(self) -> None:
        """Write the data of the frame in flight, if any, into its row (the first frame's
        codec and dictionary too when its thread trained one: the dictionary's row first, in
        the import's transaction).
        """
        if self._flight is None:
            return
        frame_id, job = self._flight
        self._flight = None
        data = job.result()
        if self._training is None:
            rsql.execute(
                self._conn, "UPDATE pack_frames SET data = ? WHERE id = ?", (data, frame_id)
            )
            return
        assert isinstance(self._training, int)
        samples, self._training = self._training, None
        trained, comp = job.trained, job.compressor
        assert comp is not None
        codec, dict_id = CODEC_ZSTD, None
        if trained is not None:
            codec = CODEC_ZSTD_DICT
            dict_id = self._insert_dictionary(trained[0], samples, packed=trained[1])
        self._chosen = (codec, dict_id, comp)
        rsql.execute(
            self._conn,
            "UPDATE pack_frames SET data = ?, codec = ?, dict_id = ? WHERE id = ?",
            (data, codec, dict_id, frame_id),
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

    def _archive_dictionary(self) -> int | None:
        """The archive's newest dictionary's id (loaded), if it has one."""
        archive = self._archive
        dict_id = archive.dictionary_id
        if dict_id is None:  # one an earlier import of this process (or another) committed
            row = rsql.fetchone(
                self._conn, "SELECT id FROM zstd_dicts WHERE purpose = 0 ORDER BY id DESC LIMIT 1"
            )
            if row is not None:
                dict_id = int(row[0])
                archive._ensure_dictionary(self._conn, dict_id)
        return dict_id

    def _must_train(self, raws: Sequence[bytes]) -> bool:
        """The first frame's dictionary is trained from its ``raws`` (none in the archive)."""
        return (
            self._archive.auto_train
            and len(raws) >= AHEAD_TRAIN_MIN
            and self._archive_dictionary() is None
        )

    def _choose(self, raws: Sequence[bytes]) -> tuple[int, int | None, zstandard.ZstdCompressor]:
        archive = self._archive
        dict_id = self._archive_dictionary()
        data: bytes | None = None
        if dict_id is not None:
            data = archive._dec.dictionary(dict_id)
        elif archive.auto_train and len(raws) >= AHEAD_TRAIN_MIN:
            trained = _train(raws, self._dict_size)
            if trained is not None:
                data = trained[0]
                dict_id = self._insert_dictionary(data, len(raws), packed=trained[1])
        if data is None or dict_id is None:
            return CODEC_ZSTD, None, zstandard.ZstdCompressor(level=AHEAD_LEVEL)
        return CODEC_ZSTD_DICT, dict_id, _compressor(data)

    def _insert_dictionary(self, data: bytes, samples: int, *, packed: tuple[int, bytes]) -> int:
        """The dictionary's row, in the import's transaction (the same bytes stored before:
        that row), stored at :data:`AHEAD_LEVEL` like the frames: level 19
        (``DICT_STORE_LEVEL``, the background trainer's) took 50-180 ms for the 112 KB
        dictionary of the 1,000-turn benchmark corpus, inside the import (13.6 KB); level 9
        takes about 2 ms (16.1 KB). ``packed``: that stored form (``_train`` made it, on the
        frame's thread when the import is behind).
        """
        return int(self._archive._store_dictionary_row(self._conn, data, samples, packed=packed))


def _train(raws: Sequence[bytes], size: int) -> tuple[bytes, tuple[int, bytes]] | None:
    """A dictionary trained from ``raws`` and its stored form (:func:`pack_dictionary` at
    :data:`AHEAD_LEVEL`), or None when they are too uniform to learn from.
    """
    try:
        data = train_dictionary(raws, size, f=AHEAD_TRAIN_F)
    except UsageError:  # too uniform to learn from: frames without one
        return None
    return data, pack_dictionary(data, AHEAD_LEVEL)


def _compressor(dictionary: bytes) -> zstandard.ZstdCompressor:
    """The frames' compressor with ``dictionary``: digested once for the level (zstd's CDict;
    undigested, every frame's compression would load it again, 10-20 ms a frame for a 112 KB
    one).
    """
    digested = digest_dictionary(dictionary, AHEAD_LEVEL)
    return zstandard.ZstdCompressor(level=AHEAD_LEVEL, dict_data=digested)


class _Compressing(threading.Thread):
    """One frame compressed on a thread of its own (a plain thread: ``concurrent.futures``
    would import ``logging`` into every import's process). ``train`` (the first frame of an
    archive without a dictionary: its messages and the dictionary's size): the thread trains
    the dictionary and makes the compressor first (``trained``, ``compressor``), where the
    importing thread reads on.
    """

    def __init__(
        self,
        comp: zstandard.ZstdCompressor | None,
        content: bytes,
        *,
        train: tuple[list[bytes], int] | None = None,
    ) -> None:
        super().__init__(name="alpstore-frame", daemon=True)
        self.compressor = comp
        self.trained: tuple[bytes, tuple[int, bytes]] | None = None
        self._train = train
        self._content: bytes | None = content
        self._out: bytes | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            assert self._content is not None
            if self._train is not None:
                raws, size = self._train
                self._train = None  # (the list is the thread's alone: freed once trained)
                self.trained = _train(raws, size)
                del raws
                self.compressor = (
                    zstandard.ZstdCompressor(level=AHEAD_LEVEL)
                    if self.trained is None
                    else _compressor(self.trained[0])
                )
            assert self.compressor is not None
            self._out = self.compressor.compress(self._content)
        except BaseException as err:  # handed to the importing thread by result()
            self._error = err
        finally:
            self._content = self._train = None

    def result(self) -> bytes:
        """The compressed frame (waits for it); the thread's error raised here."""
        self.join()
        if self._error is not None:
            raise self._error
        assert self._out is not None
        return self._out
