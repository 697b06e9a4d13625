"""The SQL blob store (SQLite or PostgreSQL through SQLAlchemy Core)."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from sqlalchemy import Connection, Integer, func, select
from sqlalchemy.dialects import sqlite

from alpstore.archive.base import ArchiveStats, Problem, VerifyReport, summary_document
from alpstore.archive.batch import FULL, decode_batch
from alpstore.archive.candidates import DeltaCandidates
from alpstore.codec import (
    CODEC_RAW,
    CODEC_ZSTD,
    CODEC_ZSTD_BASE,
    CODEC_ZSTD_DICT,
    DEFAULT_LEVEL,
    DICT_LEVEL,
    Compressor,
    Decompressor,
    Digest,
    canonical_json,
    delta_compressor,
    digest_bytes,
    digest_hex,
    line_hashes,
    pack_dictionary,
    parse_json,
    train_dictionary,
)
from alpstore.db import raw as rsql
from alpstore.db.engine import SQLITE_BUSY_TIMEOUT_MS, Database
from alpstore.db.tables import (
    BLOB_MESSAGE,
    BLOB_SUMMARY,
    blob_refs,
    blobs,
    zstd_dicts,
)
from alpstore.errors import IntegrityError, NotFoundError, UsageError

CHUNK = 500
"""Digests per IN (...) query: well under every backend's bound-parameter limit."""

SMALL_BLOB_MAX = 16 * 1024
"""Blobs up to this raw size are compressed with the trained dictionary (where it helps most)."""

AUTO_TRAIN_SAMPLES = 1000
"""A dictionary is trained automatically once the archive holds this many small blobs."""

DICT_SAMPLE_RATIO = 8
"""...but at most the samples' total size divided by this."""

DICT_SIZE = 112 * 1024
"""Trained dictionary size: measured best on coding-agent conversations (3.4x vs 2.4x)."""

DICT_ROW = (
    zstd_dicts.c.id,
    zstd_dicts.c.codec,
    zstd_dicts.c.size,
    zstd_dicts.c.digest,
    zstd_dicts.c.data,
)
"""The columns :func:`load_dictionary_row` decodes a dictionary from."""


def load_dictionary_row(dec: Decompressor, row: Any) -> bytes:
    """Decode and check a ``DICT_ROW`` row and make it available to ``dec``; returns it.

    Raises:
        IntegrityError: the row is damaged or not the dictionary its digest names.
    """
    return dec.load_dictionary(
        int(row.id), int(row.codec), bytes(row.data), int(row.size), bytes(row.digest)
    )


INSERT_BLOBS = (
    "INSERT INTO blobs (digest, kind, raw_size, codec, dict_id, payload, base_id) VALUES {rows} "
    "ON CONFLICT (digest) DO NOTHING RETURNING digest, id"
)
"""One multi-row insert that hands back the ids it assigned (a digest another transaction
stored first is not returned: it is looked up)."""
INSERT_BLOBS_PLAIN = (
    "INSERT INTO blobs (digest, kind, raw_size, codec, dict_id, payload, base_id) VALUES {rows} "
    "ON CONFLICT (digest) DO NOTHING"
)
"""The same on SQLite, without RETURNING (see :meth:`SqlArchive._insert_blobs`)."""

INSERT_ROWS = 1000
"""Rows per insert: 7,000 parameters, under SQLite's 32,766 and PostgreSQL's 65,535."""

DELTA_MIN_SIZE = 1024
"""Documents from this raw size up are tried as deltas against a recent similar one."""

DELTA_MAX_SIZE = 8 * 1024 * 1024
"""...and up to this size: a larger one is neither split into lines nor kept as a base (32 kept
bases of 70 MB each would hold 2 GB)."""

DELTA_MIN_SHARED = 0.3
"""A candidate base must share at least this fraction of the document's longer lines."""

DELTA_GAIN = 0.8
"""A delta is kept only when it is at most this fraction of the plain compressed size."""

DELTA_CANDIDATES = 32
"""How many recent large blobs a process keeps as delta bases."""

RECOMPRESS_BATCH = 100
"""Blobs re-encoded per transaction when a new dictionary recompresses the archive's first ones:
a writer beside the recompression waits for one batch at most."""

TRAIN_SLICE = 50
"""Blobs the dictionary trainer reads and decodes at a time (see ``TRAIN_PAUSE``)."""

TRAIN_PAUSE = 0.0005
"""Seconds the background trainer sleeps between slices: the interpreter lock goes to a
writer's thread waiting for it (see ``SqlArchive._training_samples``)."""

VACUUM_MAX_BYTES = 32 * 1024 * 1024
"""Archives up to this size are compacted once, after the first dictionary."""

RECLAIM_IDLE = 0.25
"""Seconds without a write from this process before the trainer compacts the SQLite file: the
VACUUM holds every writer for as long as it runs (8–12 ms at the size it first runs at), so it
waits for a pause between turns instead of landing inside one."""

RECLAIM_WAIT_MAX = 60.0
"""...but waits no longer than this (a process that never pauses pays for it once then)."""

BASE_CACHE = 64
"""How many decoded delta bases a reader keeps."""

Encoded = tuple[Digest, int, bytes]
"""A document ready to store: (digest, kind, canonical bytes)."""

Packed = dict[bytes, tuple[int, int | None, bytes]]
"""Blobs compressed ahead (:meth:`SqlArchive.pack`): digest → ``(codec, dict_id, payload)``."""


class _Row(NamedTuple):
    id: int
    digest: bytes
    kind: int
    raw_size: int
    codec: int
    dict_id: int | None
    payload: bytes
    base_id: int | None = None


def encode(value: Any, kind: int = BLOB_MESSAGE) -> Encoded:
    """Canonicalise and hash a document."""
    raw = canonical_json(value)
    return digest_bytes(raw), kind, raw


def parse_documents(items: Sequence[tuple[bytes, bytes]]) -> list[Any]:
    """Parse ``(digest, canonical bytes)`` pairs: one ``json.loads`` for the whole batch (canonical
    documents join into a valid array), per document only to name a damaged one.

    Raises:
        IntegrityError: a document is not one JSON value.
    """
    if not items:
        return []
    try:
        docs = json.loads(b"[" + b",".join(data for _, data in items) + b"]")
    except ValueError:
        docs = [parse_json(data, where=f"blob {bytes(d).hex()}") for d, data in items]
    if not isinstance(docs, list) or len(docs) != len(items):
        raise IntegrityError("a stored blob holds more than one JSON document")
    return docs


def chunks(items: Sequence[Any], size: int = CHUNK) -> Iterator[Sequence[Any]]:
    """Consecutive slices of at most ``size`` items."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


class SqlArchive:
    """Blobs in the ``blobs`` table: stored once, zstd-compressed, optionally with a dictionary."""

    def __init__(
        self,
        db: Database,
        *,
        level: int = DEFAULT_LEVEL,
        dict_level: int = DICT_LEVEL,
        auto_train: bool = True,
    ) -> None:
        self.db = db
        self.level = level
        self.dict_level = dict_level
        """zstd level of the frames made with the dictionary (small blobs)."""
        self.auto_train = auto_train
        self._dec = Decompressor()
        self._codec: tuple[int | None, Compressor] = (None, Compressor(level))
        """(dictionary id, compressor) for new blobs: one attribute, swapped whole, so a writer
        never pairs one dictionary's frames with another's id."""
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
        self._bases = DeltaCandidates(DELTA_CANDIDATES, DELTA_MIN_SHARED)
        """Recent large non-delta blobs of this process, by digest: candidates to delta against
        (see :mod:`alpstore.archive.candidates`).
        A candidate's id is looked up (and on PostgreSQL locked) in the writing transaction:
        `gc` may have deleted it since.
        """
        self._base_raw: OrderedDict[int, bytes] = OrderedDict()
        """Decoded bases by blob id, for reading delta blobs. Safe across `gc`: ids are never
        reused, and a blob's content never changes (only its encoding may)."""
        self._load_newest_dictionary()
        db.on_rollback(self._forget_uncommitted)

    def _forget_uncommitted(self) -> None:
        """A write rolled back: forget what it wrote (SQLite hands a rolled-back id out again,
        AUTOINCREMENT or not).
        """
        self._bases.clear()
        self._base_raw.clear()
        self._pending_small = 0

    # ----------------------------------------------------------------- dictionaries
    @property
    def dictionary_id(self) -> int | None:
        """The dictionary new small blobs are compressed with (None before one is trained)."""
        return self._codec[0]

    def _load_newest_dictionary(self) -> None:
        with self.db.read() as conn:
            row = conn.execute(select(*DICT_ROW).order_by(zstd_dicts.c.id.desc()).limit(1)).first()
        if row is not None and int(row.id) != self._codec[0]:
            data = load_dictionary_row(self._dec, row)
            self._codec = (int(row.id), self._compressor(data))

    def _compressor(self, dictionary: bytes) -> Compressor:
        return Compressor(self.level, dictionary, dict_level=self.dict_level)

    def _ensure_dictionary(self, conn: Connection, dict_id: int) -> None:
        if self._dec.has_dictionary(dict_id):
            return
        row = conn.execute(select(*DICT_ROW).where(zstd_dicts.c.id == dict_id)).first()
        if row is None:
            raise IntegrityError(f"zstd dictionary {dict_id} is missing from the archive")
        load_dictionary_row(self._dec, row)

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
        """The newest ``samples`` small blobs (rows and decoded bytes); with ``after``, every
        small blob without a dictionary whose id is larger.

        Read and decoded in slices of ``TRAIN_SLICE`` rows, each its own short read, with a
        pause of ``TRAIN_PAUSE`` between them: this runs beside the writers' turns (in the
        training thread), and a loop of short calls that each let go of the interpreter lock
        and take it straight back starves a thread waiting for it (that thread only gets it
        once the 5 ms switch interval forces a switch, on every try). The pause hands it over.
        The samples need not be one snapshot: each is a blob as it was when its slice was read.
        """
        sql = (
            "SELECT id, digest, kind, raw_size, codec, dict_id, payload, base_id FROM blobs "
            "WHERE raw_size <= ? AND raw_size >= 16 AND codec != ?"
        )
        params: list[Any] = [SMALL_BLOB_MAX, CODEC_ZSTD_BASE]
        if after is not None:
            sql += " AND id > ? AND codec IN (?, ?)"
            params += [after, CODEC_RAW, CODEC_ZSTD]
        rows: list[_Row] = []
        raws: list[tuple[int, bytes]] = []
        below: int | None = None
        while samples is None or len(rows) < samples:
            want = TRAIN_SLICE if samples is None else min(TRAIN_SLICE, samples - len(rows))
            query, bound = (
                (sql, params) if below is None else (f"{sql} AND id < ?", [*params, below])
            )
            with self.db.read() as conn:
                found = rsql.fetchall(conn, f"{query} ORDER BY id DESC LIMIT ?", [*bound, want])
                part = [_Row(*r) for r in found]
                decoded = self.decode_rows(conn, part, verify=False)
            rows += part
            raws += [(r.id, raw) for r, raw in zip(part, decoded, strict=True)]
            if len(part) < want:
                break
            below = part[-1].id
            time.sleep(TRAIN_PAUSE)
        return rows, raws

    def _install_dictionary(
        self, data: bytes, sample_count: int, *, only_if_none: bool
    ) -> int | None:
        """Commit ``data`` as a dictionary, then make this archive's new small blobs use it.

        Returns its id, or None when ``only_if_none`` and the archive has a dictionary already
        (that one is loaded instead: the first process to get here wins).
        """
        ddig = digest_bytes(data)
        codec, stored = pack_dictionary(data)
        dict_id = None
        with self.db.atomic() as conn:
            taken = only_if_none and bool(
                conn.execute(select(func.count()).select_from(zstd_dicts)).scalar_one()
            )
            if not taken:
                conn.execute(
                    self._insert(zstd_dicts)
                    .values(
                        digest=ddig,
                        size=len(data),
                        sample_count=sample_count,
                        created_at=time.time(),
                        data=stored,
                        codec=codec,
                    )
                    .on_conflict_do_nothing(index_elements=["digest"])
                )
                dict_id = int(
                    conn.execute(
                        select(zstd_dicts.c.id).where(zstd_dicts.c.digest == ddig)
                    ).scalar_one()
                )
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
                        "UPDATE blobs SET codec = ?, dict_id = ?, payload = ? WHERE id = ?",
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
        if not self.auto_train or self.dictionary_id is not None or new_small == 0:
            return
        if self.db.in_transaction():  # inside a caller's larger write: train after it
            self._pending_small += new_small
            return
        if self._small_count is None:
            with self.db.read() as conn:
                self._small_count = int(
                    conn.execute(
                        select(func.count())
                        .select_from(blobs)
                        .where(blobs.c.raw_size <= SMALL_BLOB_MAX)
                    ).scalar_one()
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
            if self.dictionary_id is None:
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
        with self._trainer_lock:
            trainer = self._trainer
        if trainer is not None:
            trainer.join(timeout)
            return not trainer.is_alive()
        return True

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

    def _reclaim_space(self) -> None:
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
                conn.exec_driver_sql("VACUUM blobs")
            return
        path = self.db.location
        try:
            if not self.db.is_sqlite or os.path.getsize(path) > VACUUM_MAX_BYTES:
                return
            raw = self.db.engine.raw_connection()
            try:
                driver = raw.driver_connection
                driver.execute("PRAGMA busy_timeout = 100")  # type: ignore[union-attr]
                try:
                    with self.db.writer_queue():
                        driver.execute("VACUUM")  # type: ignore[union-attr]
                    self.db.committed_outside(driver)  # the rewrite is in the WAL: fold it
                finally:  # the connection goes back to the pool: restore its patience
                    driver.execute(  # type: ignore[union-attr]
                        f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}"
                    )
            finally:
                raw.close()
        except (OSError, sqlite3.Error):
            return

    # ----------------------------------------------------------------- writing
    def _insert(self, table: Any) -> Any:
        if self.db.is_sqlite:
            return sqlite.insert(table)
        from sqlalchemy.dialects import postgresql  # imported by PostgreSQL archives only (~40 ms)

        return postgresql.insert(table)

    def _delta(self, raw: bytes, lines: frozenset[bytes], plain: int) -> tuple[bytes, bytes] | None:
        """``(base_digest, payload)`` when a recent blob makes a much smaller delta.

        The base must still be stored: the caller looks its id up in its transaction (see
        :meth:`_base_ids`) before it writes the delta.
        """
        found = self._bases.best(lines)
        if found is None:
            return None
        payload = delta_compressor(found[1], self.level).compress(raw)
        return (found[0], payload) if len(payload) < DELTA_GAIN * plain else None

    def _base_ids(self, conn: Connection, digests: Sequence[bytes]) -> dict[bytes, int]:
        """The ids of the delta bases among ``digests`` still stored whole, looked up (and
        locked on PostgreSQL until commit, so `gc` cannot delete one under its delta) in this
        transaction, in one query per :data:`CHUNK`. A base `gc` collected since, or one
        re-stored as a delta itself, is absent and forgotten as a candidate.
        """
        found: dict[bytes, int] = {}
        for part in chunks(digests):
            sql = (
                "SELECT digest, id, codec FROM blobs WHERE digest IN "
                f"({rsql.placeholders(len(part))}) FOR KEY SHARE"
            )
            for digest, blob_id, codec in rsql.fetchall(conn, sql, part):
                if codec != CODEC_ZSTD_BASE:
                    found[bytes(digest)] = int(blob_id)
        for digest in digests:
            if digest not in found:
                self._bases.discard(digest)
        return found

    def _remember_base(self, digest: bytes, raw: bytes, lines: frozenset[bytes]) -> None:
        self._bases.add(digest, raw, lines)

    def store_encoded(self, conn: Connection, items: Sequence[Encoded]) -> list[int]:
        """Insert what is missing (idempotent) and return every item's surrogate id, in order.

        Large documents that mostly repeat a recent one (a file read again after an edit) are
        stored as a zstd delta against it (one level deep, never a chain).
        """
        return self.store_encoded_counted(conn, items)[0]

    def pack(self, items: Sequence[Encoded]) -> Packed:
        """Compress ``items`` ahead of :meth:`store_encoded_counted` (its ``packed``), with the
        codec in use now: the same frames it would make. Touches no database, so it may run on
        another thread while the caller reads on (zstd works without the interpreter lock, and
        each thread compresses with contexts of its own).
        """
        unique = {digest: raw for digest, _, raw in items}
        dict_id_now, comp = self._codec
        coded = comp.compress_many(list(unique.values()), dictionary_max=SMALL_BLOB_MAX)
        return {
            digest: (codec, dict_id_now if codec == CODEC_ZSTD_DICT else None, payload)
            for digest, (codec, payload) in zip(unique, coded, strict=True)
        }

    def store_encoded_counted(
        self,
        conn: Connection,
        items: Sequence[Encoded],
        *,
        packed: Packed | None = None,
        probe: bool = True,
        known: dict[bytes, int] | None = None,
    ) -> tuple[list[int], int]:
        """:meth:`store_encoded`, and how many blobs this call inserted (an import reports it).

        ``packed``: the items compressed ahead by :meth:`pack` (any item it lacks is
        compressed here).

        ``known``: the ids of digests stored or looked up (so locked) earlier *in this same
        transaction* — they cannot be gone before it ends — taken from it instead of looked up
        again; this call adds its own. The caller drops it with the transaction.

        ``probe`` False: skip looking up which of the other items are stored already and
        insert them all, each ``ON CONFLICT DO NOTHING`` — for a caller that expects none to
        be (an import whose last batch was all new). The ids of rows a statement did not
        insert are then looked up (and locked) after it, so the result is the same; a wrong
        guess costs the compression and delta search of the rows already stored.
        """
        if not items:
            return [], 0
        wanted = list(dict.fromkeys(d for d, _, _ in items))
        ids: dict[bytes, int] = {d: known[d] for d in wanted if d in known} if known else {}
        rest = [d for d in wanted if d not in ids] if ids else wanted
        if probe and rest:
            ids.update(self.ids_for(conn, rest, lock=True))
        fresh: dict[bytes, Encoded] = {}
        inserted = 0
        for item in items:
            if item[0] not in ids and item[0] not in fresh:
                fresh[item[0]] = item
        if fresh:
            rows: list[tuple[Any, ...]] = []
            new_bases: list[tuple[bytes, bytes, frozenset[bytes]]] = []
            deltas: list[tuple[int, bytes, bytes, frozenset[bytes]]] = []
            coded = packed or {}
            todo = [item for digest, item in fresh.items() if digest not in coded]
            if todo:  # all of them, unless an import packed them ahead
                coded = {**coded, **self.pack(todo)} if coded else self.pack(todo)
            for digest, kind, raw_bytes in fresh.values():
                codec, dict_id, payload = coded[digest]
                if DELTA_MIN_SIZE <= len(raw_bytes) <= DELTA_MAX_SIZE:
                    lines = line_hashes(raw_bytes)
                    delta = self._delta(raw_bytes, lines, len(payload))
                    if delta is not None:
                        deltas.append((len(rows), delta[0], delta[1], lines))
                    else:
                        new_bases.append((digest, raw_bytes, lines))
                rows.append((digest, kind, len(raw_bytes), codec, dict_id, payload, None))
            if deltas:
                bases = self._base_ids(conn, list(dict.fromkeys(d for _, d, _, _ in deltas)))
                for i, base_digest, payload, lines in deltas:
                    row = rows[i]
                    if base_digest in bases:
                        rows[i] = (*row[:3], CODEC_ZSTD_BASE, None, payload, bases[base_digest])
                    else:  # its base is gone: stored plain, and a base itself from now on
                        new_bases.append((row[0], fresh[row[0]][2], lines))
            # One global insert order (by digest): writers racing on the same digests queue
            # behind each other instead of deadlocking.
            rows.sort()
            for part in chunks(rows, INSERT_ROWS):
                inserted += self._insert_blobs(conn, part, ids)
            raced = [d for d in fresh if d not in ids]  # stored meanwhile, or before unprobed
            if raced:
                ids.update(self.ids_for(conn, raced, lock=True))
            for base_digest, base_raw, lines in new_bases:
                self._remember_base(base_digest, base_raw, lines)
            # the small ones among those inserted (unprobed, `fresh` may hold some that were not)
            small = sum(1 for _, _, r in fresh.values() if len(r) <= SMALL_BLOB_MAX)
            self._pending_small += min(small, inserted)
        if known is not None:
            known.update(ids)
        return [ids[d] for d, _, _ in items], inserted

    def _insert_blobs(
        self, conn: Connection, part: Sequence[tuple[Any, ...]], ids: dict[bytes, int]
    ) -> int:
        """Insert blob rows (those already stored are left as they are), note the new rows'
        ids in ``ids`` and return how many there were.

        SQLite: no RETURNING. The writer holds the whole database, so when the statement
        inserted every row (its change count says so) the ids are the consecutive ones ending
        at the last insert rowid (``AUTOINCREMENT``: each row takes the largest id so far plus
        one, in the order of the VALUES); otherwise they are looked up. That spares building a
        returned row per blob, and the interpreter lock taken back for each.
        """
        values = [v for r in part for v in r]
        group = ", ".join(["(?, ?, ?, ?, ?, ?, ?)"] * len(part))
        if self.db.is_sqlite:
            cur = rsql.execute(conn, INSERT_BLOBS_PLAIN.format(rows=group), values)
            if cur.rowcount == len(part) and cur.lastrowid is not None:
                first = int(cur.lastrowid) - len(part) + 1
                for offset, row in enumerate(part):
                    ids[bytes(row[0])] = first + offset
            else:
                ids.update(self.ids_for(conn, [row[0] for row in part]))
            return int(cur.rowcount)
        inserted = 0
        for digest, blob_id in rsql.fetchall(conn, INSERT_BLOBS.format(rows=group), values):
            ids[bytes(digest)] = int(blob_id)
            inserted += 1
        return inserted

    def ids_for(
        self, conn: Connection, digests: Sequence[bytes], *, lock: bool = False
    ) -> dict[bytes, int]:
        """Surrogate ids of the stored digests among ``digests`` (unknown ones are absent).

        ``lock`` (for a writer about to reference them): on PostgreSQL the rows are locked
        ``FOR KEY SHARE`` until commit, so a concurrent GC cannot delete a blob between this
        lookup and the row that references it (SQLite writers exclude GC as a whole). Every id
        a write refers to comes from a lookup like this in its own transaction, never from a
        process-local cache.
        """
        found: dict[bytes, int] = {}
        for part in chunks(digests):
            sql = f"SELECT digest, id FROM blobs WHERE digest IN ({rsql.placeholders(len(part))})"
            if lock:
                sql += " FOR KEY SHARE"
            for digest, blob_id in rsql.fetchall(conn, sql, part):
                found[bytes(digest)] = int(blob_id)
        return found

    def after_commit(self) -> None:
        """Housekeeping once a write committed (automatic dictionary training)."""
        self._last_write = time.monotonic()
        pending = self._pending_small
        self._pending_small = 0
        self._maybe_auto_train(pending)

    def put(self, value: Any, kind: int = BLOB_MESSAGE) -> Digest:
        """Store ``value`` once; return its digest (idempotent)."""
        return self.put_many([value], kind)[0]

    def put_many(self, values: Sequence[Any], kind: int = BLOB_MESSAGE) -> list[Digest]:
        """Store every value in one transaction; return their digests in order."""
        items = [encode(v, kind) for v in values]
        with self.db.atomic() as conn:
            self.store_encoded(conn, items)
        self.after_commit()
        return [d for d, _, _ in items]

    def put_summary(self, text: str, covers: Sequence[Digest]) -> Digest:
        """Store a summary node covering ``covers`` (which must already be stored).

        Raises:
            NotFoundError: a covered digest is not in the archive.
        """
        with self.db.atomic() as conn:
            _, digest = self.store_summary(conn, text, covers)
        return digest

    def store_summary(
        self, conn: Connection, text: str, covers: Sequence[bytes]
    ) -> tuple[int, Digest]:
        """Insert a summary node and its ordered references inside ``conn``'s transaction."""
        child_ids = self.ids_for(conn, list(covers), lock=True)
        missing = [digest_hex(d) for d in covers if d not in child_ids]
        if missing:
            raise NotFoundError(f"summary covers unknown blob {missing[0]}")
        item = encode(summary_document(text, covers), BLOB_SUMMARY)
        before = self.ids_for(conn, [item[0]])
        (sid,) = self.store_encoded(conn, [item])
        if item[0] not in before:
            conn.execute(
                self._insert(blob_refs).on_conflict_do_nothing(
                    index_elements=["parent_id", "position"]
                ),
                [
                    {"parent_id": sid, "position": i, "child_id": child_ids[d]}
                    for i, d in enumerate(covers)
                ],
            )
        return sid, item[0]

    # ----------------------------------------------------------------- reading
    def _base(self, conn: Connection, base_id: int, what: str) -> bytes:
        """The raw bytes of a delta's base blob (cached; a base is never itself a delta)."""
        raw = self._base_raw.get(base_id)
        if raw is not None:
            self._base_raw.move_to_end(base_id)
            return raw
        base = self._row_by_id(conn, base_id)
        if base is None:
            raise IntegrityError(f"{what}: its delta base (blob id {base_id}) is missing")
        if base.codec == CODEC_ZSTD_BASE:
            raise IntegrityError(f"{what}: its delta base is itself a delta")
        raw = self._decode_row(conn, base, verify=True)
        self._base_raw[base_id] = raw
        while len(self._base_raw) > BASE_CACHE:
            self._base_raw.popitem(last=False)
        return raw

    def _decode_row(self, conn: Connection, row: Any, *, verify: bool = False) -> bytes:
        codec = row.codec
        base = None
        try:
            if codec == CODEC_ZSTD_DICT and row.dict_id is not None:
                self._ensure_dictionary(conn, int(row.dict_id))
            elif codec == CODEC_ZSTD_BASE:
                if row.base_id is None:
                    raise IntegrityError("a delta without a base")
                base = self._base(conn, int(row.base_id), "its base")
            raw = self._dec.decompress(
                codec, bytes(row.payload), row.raw_size, row.dict_id, what="", base=base
            )
        except IntegrityError as err:
            name = f"blob {digest_hex(bytes(row.digest))}"
            raise IntegrityError(
                f"{name}{err.message}" if err.message.startswith(":") else f"{name}: {err.message}"
            ) from err
        if verify and digest_bytes(raw) != bytes(row.digest):
            raise IntegrityError(
                f"blob {digest_hex(bytes(row.digest))}: content does not match its digest"
            )
        return raw

    def _row_by_id(self, conn: Connection, blob_id: int) -> _Row | None:
        """Blob row ``blob_id`` whole, or None when there is none."""
        row = rsql.fetchone(
            conn,
            "SELECT id, digest, kind, raw_size, codec, dict_id, payload, base_id FROM blobs "
            "WHERE id = ?",
            (blob_id,),
        )
        return None if row is None else _Row(*row)

    def _decode_id(self, conn: Connection, blob_id: int) -> bytes:
        """Blob ``blob_id`` read whole and decoded by ``_decode_row`` (errors name its digest).

        Raises:
            IntegrityError: the blob is gone or damaged.
        """
        row = self._row_by_id(conn, blob_id)
        if row is None:
            raise IntegrityError(f"blob id {blob_id} is referenced but missing from the archive")
        return self._decode_row(conn, row)

    def decode_rows(self, conn: Connection, rows: list[Any], *, verify: bool) -> list[bytes]:
        """Decode ``(id, digest, kind, raw_size, codec, dict_id, payload, base_id)`` rows.

        Unverified, in bulk (``batch.decode_batch``: grouped by codec and dictionary, every
        frame's declared size checked against the recorded one before anything is
        decompressed); anything unusual, and every blob when ``verify`` (re-hashed), through
        ``_decode_row``, which names the blob by its digest.
        """
        if verify:
            return [self._decode_row(conn, _Row(*row), verify=True) for row in rows]
        return decode_batch(self, conn, rows, FULL, lambda row: self._decode_row(conn, _Row(*row)))

    def load_raw_by_ids(
        self, conn: Connection, ids: Iterable[int], *, verify: bool = False
    ) -> dict[int, tuple[Digest, int, bytes]]:
        """Load ``{id: (digest, kind, canonical bytes)}``: hydration without parsing.

        Raises:
            IntegrityError: a blob is damaged, or an id names no blob.
        """
        out: dict[int, tuple[Digest, int, bytes]] = {}
        unique = list(dict.fromkeys(ids))
        for part in chunks(unique):
            sql = (
                "SELECT id, digest, kind, raw_size, codec, dict_id, payload, base_id FROM blobs "
                f"WHERE id IN ({rsql.placeholders(len(part))})"
            )
            rows = rsql.fetchall(conn, sql, part)
            raws = self.decode_rows(conn, rows, verify=verify)
            for r, raw in zip(rows, raws, strict=True):
                out[r[0]] = (Digest(bytes(r[1])), r[2], raw)
        if len(out) != len(unique):
            missing = next(i for i in unique if i not in out)
            raise IntegrityError(
                f"blob id {missing} is referenced but missing from the archive",
                hint="`alpstore archive verify` names the rows that refer to it",
            )
        return out

    def load_by_ids(
        self, conn: Connection, ids: Iterable[int], *, verify: bool = False
    ) -> dict[int, tuple[Digest, int, Any]]:
        """Load ``{id: (digest, kind, document)}`` for the given surrogate ids."""
        raw = self.load_raw_by_ids(conn, ids, verify=verify)
        docs = parse_documents([(d, data) for d, _, data in raw.values()])
        return {i: (d, kind, doc) for (i, (d, kind, _)), doc in zip(raw.items(), docs, strict=True)}

    def get(self, digest: Digest, *, verify: bool = False) -> Any:
        """Return the document stored under ``digest``.

        Raises:
            NotFoundError: no such blob.
            IntegrityError: the stored bytes are damaged.
        """
        return self.get_many([digest], verify=verify)[0]

    def get_many(self, digests: Sequence[Digest], *, verify: bool = False) -> list[Any]:
        """Return the documents stored under ``digests``, in order.

        Raises:
            NotFoundError: a digest is not stored (the first one is named).
        """
        with self.db.read() as conn:
            ids = self.ids_for(conn, list(digests))
            for d in digests:
                if d not in ids:
                    raise NotFoundError(f"no blob {digest_hex(d)} in the archive")
            loaded = self.load_by_ids(conn, ids.values(), verify=verify)
        return [loaded[ids[d]][2] for d in digests]

    def get_raw(self, digest: Digest, *, verify: bool = True) -> tuple[int, bytes]:
        """Return ``(kind, canonical bytes)`` of a blob.

        Raises:
            NotFoundError: no such blob.
        """
        with self.db.read() as conn:
            row = conn.execute(select(blobs).where(blobs.c.digest == digest)).first()
            if row is None:
                raise NotFoundError(f"no blob {digest_hex(digest)} in the archive")
            return int(row.kind), self._decode_row(conn, row, verify=verify)

    def has(self, digest: Digest) -> bool:
        """True when ``digest`` is stored."""
        with self.db.read() as conn:
            return bool(self.ids_for(conn, [digest]))

    def stats(self) -> ArchiveStats:
        """Counts and sizes of the stored blobs."""
        with self.db.read() as conn:
            row = conn.execute(
                select(
                    func.count(),
                    func.coalesce(func.sum(blobs.c.raw_size), 0),
                    func.coalesce(func.sum(func.length(blobs.c.payload)), 0),
                    func.coalesce(func.sum((blobs.c.kind == BLOB_MESSAGE).cast(Integer)), 0),
                    func.coalesce(func.sum((blobs.c.kind == BLOB_SUMMARY).cast(Integer)), 0),
                    func.coalesce(func.sum((blobs.c.codec == CODEC_ZSTD_DICT).cast(Integer)), 0),
                )
            ).one()
            ndicts = int(conn.execute(select(func.count()).select_from(zstd_dicts)).scalar_one())
        total, raw, stored, msgs, sums, dicted = (int(x) for x in row)
        return ArchiveStats(
            blobs=total,
            messages=msgs,
            summaries=sums,
            other=total - msgs - sums,
            raw_bytes=raw,
            stored_bytes=stored,
            dictionaries=ndicts,
            dict_compressed=dicted,
        )

    def verify(self) -> VerifyReport:
        """Decode and check every dictionary row; decompress and re-hash every blob; check
        sizes, codecs and summary references.
        """
        report = VerifyReport()
        bad: list[tuple[int, bytes, str]] = []
        with self.db.read() as conn:
            report.problems.extend(self._verify_dictionaries(conn))
            last = 0
            while True:
                rows = conn.execute(
                    select(blobs).where(blobs.c.id > last).order_by(blobs.c.id).limit(CHUNK)
                ).all()
                if not rows:
                    break
                for row in rows:
                    last = int(row.id)
                    report.blobs_checked += 1
                    digest = bytes(row.digest)
                    try:
                        if row.codec not in (
                            CODEC_RAW,
                            CODEC_ZSTD,
                            CODEC_ZSTD_DICT,
                            CODEC_ZSTD_BASE,
                        ):
                            raise IntegrityError(f"blob {digest.hex()}: unknown codec {row.codec}")
                        raw = self._decode_row(conn, row, verify=True)
                        doc = parse_json(raw, where=f"blob {digest.hex()}")
                        if row.kind == BLOB_SUMMARY:
                            self._check_summary_refs(conn, int(row.id), digest, doc)
                    except Exception as exc:  # every failure of one blob is a finding
                        bad.append((int(row.id), digest, str(exc)))
        report.problems.extend(Problem(what=msg, digest=d.hex()) for _, d, msg in bad)
        report.bad_blob_ids = [i for i, _, _ in bad]
        return report

    def _verify_dictionaries(self, conn: Connection) -> list[Problem]:
        """Every ``zstd_dicts`` row decoded and checked against its digest as stored now, with
        a decompressor of its own: a process that loaded a dictionary before its row was
        damaged still decodes blobs from its own copy, and would not see the damage there.
        """
        problems = []
        check = Decompressor()
        for row in conn.execute(select(*DICT_ROW).order_by(zstd_dicts.c.id)):
            try:
                load_dictionary_row(check, row)
            except IntegrityError as exc:
                users = conn.execute(
                    select(func.count()).select_from(blobs).where(blobs.c.dict_id == row.id)
                ).scalar_one()
                problems.append(Problem(what=f"{exc} ({users} blob(s) are compressed with it)"))
        return problems

    def _check_summary_refs(self, conn: Connection, blob_id: int, digest: bytes, doc: Any) -> None:
        covers = doc.get("covers") if isinstance(doc, dict) else None
        refs = (
            conn.execute(
                select(blobs.c.digest)
                .select_from(blob_refs.join(blobs, blobs.c.id == blob_refs.c.child_id))
                .where(blob_refs.c.parent_id == blob_id)
                .order_by(blob_refs.c.position)
            )
            .scalars()
            .all()
        )
        if covers != [bytes(r).hex() for r in refs]:
            raise IntegrityError(
                f"summary {digest.hex()}: covered list does not match its stored references"
            )
