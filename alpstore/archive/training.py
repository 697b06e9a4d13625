"""Dictionary training of the SQL blob store: a zstd dictionary learnt from the archive's small
blobs (on demand, or in a background thread once enough are stored), installed, and the first
blobs recompressed with it; then the space that freed given back (VACUUM).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from alpstore.archive.frames import CODEC_PACKED
from alpstore.archive.reading import ArchiveReader, BlobRow, chunks, store_dictionary_row
from alpstore.codec import (
    CODEC_RAW,
    CODEC_ZSTD,
    CODEC_ZSTD_BASE,
    CODEC_ZSTD_DICT,
    DEFAULT_LEVEL,
    DICT_LEVEL,
    train_dictionary,
)
from alpstore.db import raw as rsql
from alpstore.db.members import DESCRIPTION, Described
from alpstore.db.names import SQLITE_BUSY_TIMEOUT_MS
from alpstore.errors import UsageError

if TYPE_CHECKING:
    from alpstore.db.database import Database

SMALL_BLOB_MAX = 16 * 1024
"""Blobs up to this raw size are compressed with the trained dictionary (where it helps most)."""

AUTO_TRAIN_SAMPLES = 1000
"""A dictionary is trained automatically once the archive holds this many small blobs."""

DICT_SAMPLE_RATIO = 8
"""...but at most the samples' total size divided by this."""

DICT_SIZE = 112 * 1024
"""Trained dictionary size: measured best on coding-agent conversations (3.4x vs 2.4x)."""

TRAIN_SAMPLE_BYTES = 16 * 1024 * 1024
"""The most bytes of samples a dictionary learns from (about 150x its size; zstd's guide is
100x): the samples and the trainer's copy of them are held in memory at once. 8,000 samples of
coding-agent messages (~500 B each) are 4 MB; of 11 KB messages they were 88 MB, and a 100 MB
import peaked at 308 MB instead of 160 MB (``benchmarks/bench_portable.py``)."""


# (every packed blob is small: PACK_BLOB_MAX is SMALL_BLOB_MAX, so a frame's members count whole)
SAMPLE_WHERE = f"raw_size <= {SMALL_BLOB_MAX} AND raw_size >= 16 AND codec != {CODEC_ZSTD_BASE}"
"""The blobs a dictionary learns from: small ones, not deltas (``_training_samples``, and the
count a pack run compares with its dictionary's samples)."""

RECOMPRESS_BATCH = 100
"""Blobs re-encoded per transaction when a new dictionary recompresses the archive's first ones:
a writer beside the recompression waits for one batch at most."""

TRAIN_SLICE = 50
"""Blobs the dictionary trainer reads and decodes at a time (see ``TRAIN_PAUSE``)."""

TRAIN_PAUSE = 0.0005
"""Seconds the background trainer sleeps between slices: the interpreter lock goes to a
writer's thread waiting for it (see ``SqlArchive._training_samples``)."""

SETTLE_SLICE = 1000
"""Blobs :meth:`DictionaryTraining.settle` reads and decodes at a time to recompress them."""

VACUUM_MAX_BYTES = 32 * 1024 * 1024
"""Archives up to this size are compacted once, after the first dictionary."""

RECLAIM_IDLE = 0.25
"""Seconds without a write from this process before the trainer compacts the SQLite file: the
VACUUM holds every writer for as long as it runs (8–12 ms at the size it first runs at), so it
waits for a pause between turns instead of landing inside one."""

RECLAIM_WAIT_MAX = 60.0
"""...but waits no longer than this (a process that never pauses pays for it once then)."""


class Settled(NamedTuple):
    """What :meth:`DictionaryTraining.settle` did after a bulk write."""

    dictionary: int | None
    """The dictionary it trained (None: none was needed, or too few small blobs)."""
    recompressed: int
    """Blobs it re-encoded with that dictionary."""
    bytes_before: int
    """The SQLite file's size (with its WAL) before the compaction (0: none ran)."""
    bytes_after: int
    """...and after."""
    packed: Any = None
    """What packing did (``SqlArchive.settle``: a ``PackReport``), or None."""


def _file_size(path: str) -> int:
    """A SQLite file's size with its WAL (0 when it is gone)."""
    total = 0
    for name in (path, path + "-wal"):
        with contextlib.suppress(OSError):
            total += os.path.getsize(name)
    return total


def joined(thread: threading.Thread | None, timeout: float | None) -> bool:
    """Wait for ``thread`` (None: none runs) up to ``timeout`` seconds; True once it ended."""
    if thread is not None:
        thread.join(timeout)
        return not thread.is_alive()
    return True


class DictionaryTraining(ArchiveReader):
    """Training, installing and using a zstd dictionary."""

    db: Database

    def __init__(
        self,
        db: Database,
        *,
        level: int = DEFAULT_LEVEL,
        dict_level: int = DICT_LEVEL,
        auto_train: bool = True,
    ) -> None:
        self.auto_train = auto_train
        self._small_count: int | None = None
        self._pending_small = 0
        self._trainer: threading.Thread | None = None
        """The background thread training the automatic dictionary, while it runs."""
        self._trainer_lock = threading.Lock()
        self._closed = False
        self._closing = threading.Event()
        """Set by :meth:`close`: wakes a trainer waiting for a pause to compact the file."""
        self._last_write = time.monotonic()
        """When this process last committed a write through :meth:`after_commit`."""
        self._train_at = AUTO_TRAIN_SAMPLES
        """Small-blob count at which the next automatic training starts (raised after a failure,
        so a failing training is not retried on every write)."""
        self.training_error: BaseException | None = None
        """Why the last background training failed (retried once as many small blobs again are
        stored)."""
        super().__init__(db, level=level, dict_level=dict_level)

    def _forget_uncommitted(self) -> None:
        self._pending_small = 0
        super()._forget_uncommitted()

    def train_dictionary(
        self,
        *,
        samples: int = 4000,
        size: int = DICT_SIZE,
        recompress: bool = True,
        only_if_none: bool = False,
    ) -> tuple[int, int, int]:
        """Train a new dictionary from the archive's small blobs and use it from now on.

        Returns ``(dict_id, samples_used, blobs_recompressed)``. Blobs it recompresses keep
        their digest and content; only their stored encoding changes. Each step is its own
        short transaction: the dictionary row commits before anything refers to it (this
        archive's writers switch to it only then), and the recompression runs in batches of
        ``RECOMPRESS_BATCH`` rows, so a writer beside it waits for one batch at most.

        Raises:
            UsageError: the archive holds too few small blobs to learn from.
        """
        if self.db.in_transaction():
            raise UsageError("train_dictionary runs its own transactions: call it outside one")
        rows, raws = self._training_samples(samples)
        if len(raws) < 8:
            raise UsageError(
                f"only {len(raws)} small blobs in the archive; a dictionary needs at least 8",
                hint=f"it is trained automatically once {AUTO_TRAIN_SAMPLES} are stored",
            )
        total = sum(len(r) for _, r in raws)
        data = train_dictionary(
            [r for _, r in raws], max(1024, min(size, total // DICT_SAMPLE_RATIO))
        )
        dict_id = self._install_dictionary(data, len(raws), only_if_none=only_if_none)
        if dict_id is None:  # automatic training lost to another process's dictionary
            return self.dictionary_id or 0, 0, 0
        changed = 0
        if recompress:
            # and the small blobs written without it while it was trained
            late_rows, late = self._training_samples(None, after=max(i for i, _ in raws))
            current = {int(r.id): len(r.payload) for r in [*rows, *late_rows]}
            items = [(i, raw, current[i]) for i, raw in [*raws, *late]]
            changed = self._recompress(dict_id, items)
        return dict_id, len(raws), changed

    def _training_samples(
        self, samples: int | None, *, after: int | None = None
    ) -> tuple[list[Any], list[tuple[int, bytes]]]:
        """The newest ``samples`` small blobs (rows and decoded bytes), stopping once they hold
        :data:`TRAIN_SAMPLE_BYTES`; with ``after``, every small blob without a dictionary whose
        id is larger (to recompress them: not capped).

        Read and decoded in slices of ``TRAIN_SLICE`` rows, each its own short read, with a
        pause of ``TRAIN_PAUSE`` between them: this runs beside the writers' turns (in the
        training thread), and a loop of short calls that each let go of the interpreter lock
        and take it straight back starves a thread waiting for it (that thread only gets it
        once the 5 ms switch interval forces a switch, on every try). The pause hands it over.
        The samples need not be one snapshot: each is a blob as it was when its slice was read.
        """
        sql = (
            "SELECT id, digest, kind, raw_size, codec, dict_id, payload, base_id FROM blob_rows "
            f"WHERE {SAMPLE_WHERE}"
        )
        params: list[Any] = []
        if after is not None:
            sql += " AND id > ? AND codec IN (?, ?)"
            params += [after, CODEC_RAW, CODEC_ZSTD]
        rows: list[BlobRow] = []
        raws: list[tuple[int, bytes]] = []
        below: int | None = None
        held = 0
        while samples is None or (len(rows) < samples and held < TRAIN_SAMPLE_BYTES):
            want = TRAIN_SLICE if samples is None else min(TRAIN_SLICE, samples - len(rows))
            query, bound = (
                (sql, params) if below is None else (f"{sql} AND id < ?", [*params, below])
            )
            with self.db.read() as conn:
                found = rsql.fetchall(conn, f"{query} ORDER BY id DESC LIMIT ?", [*bound, want])
                if after is None:  # and the frames' members (0010: no rows of their own)
                    found = _newest(found, _packed_samples(conn, below, want), want)
                part = [BlobRow(*r) for r in found]
                decoded = self.decode_rows(conn, part, verify=False)
            rows += part
            raws += [(r.id, raw) for r, raw in zip(part, decoded, strict=True)]
            held += sum(len(raw) for raw in decoded)
            if len(part) < want:
                break
            below = part[-1].id
            time.sleep(TRAIN_PAUSE)
        return rows, raws

    def _store_dictionary_row(
        self,
        conn: Any,
        data: bytes,
        sample_count: int,
        *,
        packed: tuple[int, bytes] | None = None,
    ) -> int:
        """Insert dictionary ``data`` in the caller's transaction; its id
        (:func:`alpstore.archive.reading.store_dictionary_row`).
        """
        return store_dictionary_row(conn, data, sample_count, packed=packed)

    def _install_dictionary(
        self, data: bytes, sample_count: int, *, only_if_none: bool
    ) -> int | None:
        """Commit ``data`` as a dictionary, then make this archive's new small blobs use it.

        Returns its id, or None when ``only_if_none`` and the archive has a dictionary already
        (that one is loaded instead: the first process to get here wins).
        """
        dict_id = None
        with self.db.atomic() as conn:
            taken = only_if_none and bool(
                rsql.fetchone(conn, "SELECT count(*) FROM zstd_dicts WHERE purpose = 0")[0]
            )
            if not taken:
                dict_id = self._store_dictionary_row(conn, data, sample_count)
        # committed (train_dictionary refuses to run inside a caller's transaction): blobs may
        # refer to it from now on
        if dict_id is None:
            self._load_newest_dictionary()
            return None
        self._dec.add_dictionary(dict_id, data)
        compressor = self._compressor(data)
        compressor.warm()  # here, not in the first turn of a writer that uses it
        self._codec = (dict_id, compressor)
        return dict_id

    def _recompress(self, dict_id: int, items: Sequence[tuple[int, bytes, int]]) -> int:
        """Re-encode ``(blob id, raw bytes, current payload size)`` with dictionary ``dict_id``
        where that is smaller, ``RECOMPRESS_BATCH`` rows per transaction (compressed before the
        transaction opens). A blob `gc` deleted meanwhile is simply not updated.
        """
        current_id, comp = self._codec  # its dictionary digested already (by the trainer)
        if current_id != dict_id:
            comp = self._compressor(self._dec.dictionary(dict_id))
        changed = 0
        for part in chunks(items, RECOMPRESS_BATCH):
            updates = []
            raws = [raw for _, raw, _ in part]
            # one call for the batch: zstd keeps the interpreter lock for none of it, where a
            # call per blob took it back (from a writer's thread waiting for it) a hundred times
            packed = comp.compress_many(raws, dictionary_max=max(map(len, raws)))
            for (blob_id, _, size), (codec, payload) in zip(part, packed, strict=True):
                if codec == CODEC_ZSTD_DICT and len(payload) < size:
                    updates.append((codec, dict_id, payload, blob_id))
            if updates:
                with self.db.atomic() as conn:
                    rsql.executemany(
                        conn,
                        "UPDATE blob_rows SET codec = ?, dict_id = ?, payload = ? WHERE id = ?",
                        updates,
                    )
                changed += len(updates)
            time.sleep(TRAIN_PAUSE)  # the interpreter lock to a writer waiting for it
        return changed

    def _maybe_auto_train(self, new_small: int) -> None:
        """Once the archive holds ``AUTO_TRAIN_SAMPLES`` small blobs, start training.

        The training runs in a background thread with its own connection and short
        transactions of its own (``_train_in_background``): the write that crossed the
        threshold returns at once instead of paying for training and recompression.
        """
        if (
            not self.auto_train
            or self.dictionary_id is not None
            or self._damaged_dictionary is not None
            or new_small == 0
        ):
            return
        if self.db.in_transaction():  # inside a caller's larger write: train after it
            self._pending_small += new_small
            return
        if self._small_count is None:
            with self.db.read() as conn:
                self._small_count = int(
                    rsql.fetchone(
                        conn,
                        "SELECT (SELECT count(*) FROM blob_rows WHERE raw_size <= ?) + "
                        "(SELECT coalesce(sum(blob_count), 0) FROM pack_frames)",
                        (SMALL_BLOB_MAX,),
                    )[0]
                )
        else:
            self._small_count += new_small
        if self._small_count >= max(self._train_at, AUTO_TRAIN_SAMPLES):
            with self._trainer_lock:
                if self._trainer is not None or self._closed:
                    return
                self._trainer = threading.Thread(
                    target=self._train_in_background,
                    args=(self._small_count,),
                    name="alpstore-dictionary",
                    daemon=True,  # an unclosed store must not hold the interpreter open
                )
                self._trainer.start()

    def _train_in_background(self, samples: int) -> None:
        """Train, install and recompress (the trainer thread's body); never raises.

        Safe beside this process's writers, other processes and `gc`: the dictionary row
        commits before any blob refers to it, and each recompression batch is a transaction
        that only re-encodes rows still there.
        """
        try:
            self._load_newest_dictionary()  # another process may have trained one already
            if self.dictionary_id is None and self._damaged_dictionary is None:
                _, _, changed = self.train_dictionary(samples=samples, only_if_none=True)
                if changed:
                    if self.db.is_sqlite:
                        self._wait_for_pause()
                    self._reclaim_space()
            self.training_error = None
        except BaseException as err:  # kept for the caller to see; retried later
            self.training_error = err
            self._train_at = samples + AUTO_TRAIN_SAMPLES
        finally:
            with self._trainer_lock:
                self._trainer = None

    def _wait_for_pause(self) -> None:
        """Return once this process has not written for :data:`RECLAIM_IDLE` seconds, the
        archive is closing, or :data:`RECLAIM_WAIT_MAX` seconds have passed.
        """
        give_up = time.monotonic() + RECLAIM_WAIT_MAX
        while not self._closing.is_set():
            now = time.monotonic()
            quiet = now - self._last_write
            if quiet >= RECLAIM_IDLE or now >= give_up:
                return
            self._closing.wait(min(RECLAIM_IDLE - quiet, give_up - now))

    def wait_for_training(self, timeout: float | None = None) -> bool:
        """Block until a background training this archive started has finished (or
        ``timeout`` seconds passed); True when none is running any more.
        """
        with self._trainer_lock:  # read under the lock, waited for outside it (its thread
            trainer = self._trainer  # takes the lock to say it ended)
        return joined(trainer, timeout)

    @property
    def training(self) -> bool:
        """True while a background training of this archive runs."""
        with self._trainer_lock:
            return self._trainer is not None

    def close(self) -> None:
        """Let a running background training finish, and start no new one.

        ``Store.close`` calls it before the database closes. The training is bounded (the
        samples of one archive, recompressed in short batches), so this waits briefly; a
        process that crossed the threshold just before closing still leaves its dictionary.
        """
        with self._trainer_lock:
            self._closed = True
        self._closing.set()
        self.wait_for_training()

    def settle(self) -> Settled:
        """After a bulk write that ran in one transaction (an import): train the dictionary
        it deferred and compact the SQLite file, in the caller's thread, each step its own
        short transaction (never inside the caller's).

        The dictionary follows the automatic rule (:data:`AUTO_TRAIN_SAMPLES` small blobs and
        no dictionary yet); every small blob is recompressed with it, then the file is
        compacted (the space their old encodings took given back): see :meth:`compact`.
        ``SqlArchive.settle`` packs the cold blobs instead of recompressing them.

        Raises:
            UsageError: called inside a transaction.
        """
        trained, recompressed = self.train_deferred(recompress=True)
        before, after = self.compact() if recompressed else (0, 0)
        return Settled(trained, recompressed, before, after)

    def train_deferred(self, *, recompress: bool) -> tuple[int | None, int]:
        """The automatic training a bulk write deferred, run now in the caller's thread:
        ``(the dictionary trained or None, blobs recompressed with it)``; ``recompress`` False
        leaves the blobs as they are (they are about to be packed).

        Raises:
            UsageError: called inside a transaction.
        """
        if self.db.in_transaction():
            raise UsageError("settle runs its own transactions: call it outside one")
        self.wait_for_training()
        self._pending_small = 0
        self._load_newest_dictionary()  # another process may have trained one already
        if not self.auto_train or self.dictionary_id is not None or self._damaged_dictionary:
            return None, 0
        with self.db.read() as conn:  # loose ones: a packed blob needs no dictionary
            small = int(
                rsql.fetchone(
                    conn,
                    "SELECT count(*) FROM blob_rows WHERE raw_size <= ? AND codec != ?",
                    (SMALL_BLOB_MAX, CODEC_PACKED),
                )[0]
            )
        self._small_count = None  # counted afresh (packed ones too) by the next write
        if small < max(self._train_at, AUTO_TRAIN_SAMPLES):
            return None, 0
        dict_id, used, recompressed = self.train_dictionary(
            samples=max(4000, AUTO_TRAIN_SAMPLES), only_if_none=True, recompress=recompress
        )
        if not used:  # another process's dictionary won
            return None, 0
        if recompress:  # the older small blobs too (the training read the newest ones)
            recompressed += self._recompress_all(dict_id)
        return dict_id, recompressed

    def _recompress_all(self, dict_id: int) -> int:
        """Re-encode with dictionary ``dict_id`` every small blob stored without one, in
        ascending id order, :data:`SETTLE_SLICE` read and decoded at a time (memory stays
        bounded however large the archive), each batch its own transaction.
        """
        sql = (
            "SELECT id, digest, kind, raw_size, codec, dict_id, payload, base_id FROM blob_rows "
            "WHERE raw_size <= ? AND raw_size >= 16 AND codec IN (?, ?) AND id > ? "
            "ORDER BY id LIMIT ?"
        )
        changed = last = 0
        while True:
            with self.db.read() as conn:
                params = [SMALL_BLOB_MAX, CODEC_RAW, CODEC_ZSTD, last, SETTLE_SLICE]
                part = [BlobRow(*r) for r in rsql.fetchall(conn, sql, params)]
                decoded = self.decode_rows(conn, part, verify=False)
            if not part:
                return changed
            last = part[-1].id
            items = [(r.id, raw, len(r.payload)) for r, raw in zip(part, decoded, strict=True)]
            changed += self._recompress(dict_id, items)

    def compact(self) -> tuple[int, int]:
        """Give back the SQLite file's free pages now: ``VACUUM`` when the file is at most
        :data:`VACUUM_MAX_BYTES` (milliseconds at that size), else an incremental vacuum when
        the file allows one (``auto_vacuum = INCREMENTAL``; otherwise its free pages are
        reused by later inserts). Returns the file's size (with its WAL) before and after;
        ``(0, 0)`` on PostgreSQL, where a plain ``VACUUM`` of ``blobs`` runs instead.
        """
        if not self.db.is_sqlite:
            self._reclaim_space()
            return 0, 0
        before = _file_size(self.db.location)
        self._reclaim_space(incremental=before > VACUUM_MAX_BYTES)
        return before, _file_size(self.db.location)

    def _reclaim_space(self, *, incremental: bool = False) -> None:
        """Give back the space the recompression freed (it rewrote the first small blobs).

        SQLite: VACUUM a small archive file (in-place rewrites leave holes in pages that later
        inserts never reuse; at this size it takes milliseconds), queued like any writer, at a
        pause in this process's writes (:meth:`_wait_for_pause`) or when the archive closes.
        PostgreSQL: a plain ``VACUUM`` of ``blobs`` (and its TOAST table), so the old versions
        of the rewritten rows are not left as dead tuples; it takes no lock writers wait for,
        and later inserts reuse the space. Skipped quietly when refused or busy.
        """
        if self.db.is_postgresql:
            with (
                contextlib.suppress(Exception),
                self.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn,
            ):
                conn.exec_driver_sql("VACUUM blob_rows")
            return
        path = self.db.location
        try:
            if not self.db.is_sqlite or (
                not incremental and os.path.getsize(path) > VACUUM_MAX_BYTES
            ):
                return
            with self.db.outside() as driver:
                driver.execute("PRAGMA busy_timeout = 100")
                try:
                    with self.db.writer_queue():
                        if not incremental:
                            driver.execute("VACUUM")
                        elif driver.execute("PRAGMA auto_vacuum").fetchone()[0] == 2:
                            driver.execute("PRAGMA incremental_vacuum")
                    self.db.committed_outside(driver)  # the rewrite is in the WAL: fold it
                finally:  # the connection goes back to the pool: restore its patience
                    driver.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        except (OSError, sqlite3.Error):
            return


def _packed_samples(conn: Any, below: int | None, want: int) -> list[tuple[Any, ...]]:
    """The newest ``want`` frame members (rows of the old ``blobs`` shape) with ids below
    ``below`` (all when None) that a dictionary learns from, newest first: frames read newest
    first until they hold as many.
    """
    out: list[tuple[Any, ...]] = []
    top = below
    while len(out) < want:
        sql = f"SELECT {DESCRIPTION} FROM pack_frames"
        params: list[Any] = []
        if top is not None:
            sql += " WHERE first_id < ?"
            params.append(top)
        row = rsql.fetchone(conn, f"{sql} ORDER BY first_id DESC LIMIT 1", params)
        if row is None:
            break
        frame = Described(row)
        out += [
            m
            for m in frame.rows()
            if (below is None or m[0] < below) and 16 <= m[3] <= SMALL_BLOB_MAX
        ]
        top = min(frame.ids) if frame.ids else int(row[1])
    out.sort(key=lambda m: -int(m[0]))
    return out[:want]


def _newest(a: Sequence[Any], b: Sequence[Any], want: int) -> list[Any]:
    """The ``want`` rows with the largest ids of two lists."""
    return sorted([*a, *b], key=lambda r: -int(r[0]))[:want]
