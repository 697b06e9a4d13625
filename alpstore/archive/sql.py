"""The SQL blob store (SQLite or PostgreSQL): ``SqlArchive``, made of its read path
(``reading``, no SQLAlchemy), dictionary training (``training``) and write path
(``writing``), with the archive-wide checks (``stats``, ``verify``) here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from alpstore.archive.ahead import FramesAhead
from alpstore.archive.base import ArchiveStats, Problem, VerifyReport
from alpstore.archive.frames import CODEC_PACKED
from alpstore.archive.packing import (
    PACK_BLOB_MAX,
    PACK_TRAIN_SAMPLES,
    FrameStats,
    PackReport,
    PackWriting,
)
from alpstore.archive.reading import (
    BASE_CACHE,
    CHUNK,
    BlobRow,
    Encoded,
    chunks,
    encode,
    load_dictionary_row,
    parse_documents,
)
from alpstore.archive.training import (
    AUTO_TRAIN_SAMPLES,
    DICT_SIZE,
    SAMPLE_WHERE,
    SMALL_BLOB_MAX,
    TRAIN_SAMPLE_BYTES,
    Settled,
    joined,
)
from alpstore.archive.writing import ArchiveWriter, Packed
from alpstore.codec import (
    CODEC_RAW,
    CODEC_ZSTD,
    CODEC_ZSTD_BASE,
    CODEC_ZSTD_DICT,
    Decompressor,
    parse_json,
)
from alpstore.db import raw as rsql
from alpstore.db.members import (
    DESCRIPTION,
    LOCK_NEW_BLOBS,
    LOOSE_SELECT,
    Described,
    digest_key,
    rows_by_id,
)
from alpstore.db.names import BLOB_MESSAGE, BLOB_SUMMARY
from alpstore.db.runmerge import RunMerger
from alpstore.errors import IntegrityError, UsageError

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from alpstore.db.database import Database

__all__ = [
    "AUTO_TRAIN_SAMPLES",
    "BASE_CACHE",
    "CHUNK",
    "DICT_SIZE",
    "PACK_EVERY",
    "PACK_EVERY_POSTGRESQL",
    "PACK_KEEP_LOOSE",
    "SMALL_BLOB_MAX",
    "Encoded",
    "FrameStats",
    "PackReport",
    "Packed",
    "SqlArchive",
    "chunks",
    "encode",
    "load_dictionary_row",
    "parse_documents",
]


PACK_EVERY = 4000
"""A long-lived writer packs in the background once it has stored this many new blobs (beyond
:data:`PACK_KEEP_LOOSE`) since it opened the archive or last packed."""

PACK_KEEP_LOOSE = 1000
"""...leaving its newest this many blobs loose: the turns a live writer reads back at once."""

PACK_EVERY_POSTGRESQL = 512
""":data:`PACK_EVERY` on PostgreSQL, where the packer packs whole frames only: a packed blob's
row is deleted from ``blob_rows``, whose heap and two indexes keep the room of the most loose
rows they ever held (autovacuum makes it reusable, never smaller). Packing at 4,000 left that
high-water at ~5,000 rows: 0.09x of each further raw byte from 400 to 2,000 turns
(``bench_packs.py --postgres``). At about a frame's worth (the newest ``PACK_KEEP_LOOSE``
counted again after each packing), ~2,000 rows: 0.012-0.033x."""

PACK_TURN_NEW = 512
"""A writer's turn ended (:meth:`SqlArchive.pack_at_turn_end`): pack at once, without waiting
for a pause, once this many new blobs were stored since the last packing (about a frame's
worth of messages, :data:`~alpstore.archive.packing.FRAME_TARGET`, at ~0.5 KB each)."""

PACKED_ROWS = 100
"""Rows per insert of :meth:`SqlArchive.store_packed`: the driver parses a statement's
placeholders into objects of its own (about 100 B each; 1,000 rows of 7 held 0.7 MB)."""


class SqlArchive(PackWriting, ArchiveWriter):
    """Blobs in the ``blobs`` table: stored once, zstd-compressed, optionally with a dictionary;
    cold ones packed into frames (``pack_frames``: :mod:`alpstore.archive.packing`), by
    ``archive pack``, after an import, and in the background of a long-lived writer.
    """

    auto_pack: bool = True
    """Pack in the background of this process's writes (see :meth:`_maybe_auto_pack`)."""
    packing_error: BaseException | None = None
    """Why the last background packing failed (it is tried again after as many new blobs)."""
    _packer: threading.Thread | None = None
    _since_pack = 0

    def __init__(self, db: Database, **options: Any) -> None:
        super().__init__(db, **options)
        self._pack_lock = threading.Lock()
        """Held by :meth:`pack_cold`: this process's packings run one at a time (an import's
        settle and the background packer would otherwise pack the same blobs twice)."""
        self.runs = RunMerger()
        """This process's merging of small runs (the packer's, and ``archive pack``'s)."""

    # ----------------------------------------------------------------- background packing
    def _maybe_auto_pack(self, new_blobs: int) -> None:
        """After a committed write: once :data:`PACK_EVERY` + :data:`PACK_KEEP_LOOSE` new
        blobs are stored, start the packer thread (one at a time).

        Like the dictionary trainer, it runs on a thread of its own with short transactions of
        its own, never inside a turn's: it waits for a pause in this process's writes
        (``_wait_for_pause``: no write for ``RECLAIM_IDLE`` s, at most ``RECLAIM_WAIT_MAX``)
        before each frame, so a writer waits for one frame's transaction at most, and it stops
        at the next frame when the archive closes. A kill -9 leaves every blob loose or packed.
        """
        if not self.auto_pack or new_blobs <= 0:
            return
        if self.db.in_transaction():  # a turn inside a caller's larger write (an import):
            self._pending_new += new_blobs  # counted once that write commits, if ever
            return
        self._since_pack += new_blobs
        every = PACK_EVERY_POSTGRESQL if self.db.is_postgresql else PACK_EVERY
        if self._since_pack < every + PACK_KEEP_LOOSE:
            return
        self._start_packer(at_once=False)

    def _start_packer(self, *, at_once: bool) -> bool:
        """Start the packer thread unless one runs or the archive is closed; True when it
        started. ``at_once``: whole frames, no wait for a pause (:meth:`pack_at_turn_end`).
        """
        with self._trainer_lock:
            if self._closed or self._packer is not None:
                return False
            self._since_pack = 0
            self._packer = threading.Thread(
                target=self._pack_in_background,
                kwargs={"at_once": at_once},
                name="alpstore-packer",
                daemon=True,  # an unclosed store must not hold the interpreter open
            )
            self._packer.start()
        return True

    def pack_at_turn_end(self) -> bool:
        """A writer's turn ended (``AlpstoreSaver``: a thread's next input came): once
        :data:`PACK_TURN_NEW` blobs were stored since the last packing, start the packer
        thread now instead of at a pause in the writes, which a writer driven in a tight loop
        never makes. It packs whole frames only (the newest blobs that do not fill one stay
        loose for the next time), each frame in a short transaction of its own, off the
        writer's thread; it stops at the next frame when the archive closes. True when it
        started.
        """
        if not self.auto_pack or self._since_pack < PACK_TURN_NEW:
            return False
        return self._start_packer(at_once=True)

    def _pack_in_background(self, *, at_once: bool = False) -> None:
        """The packer thread's body; never raises (the error is kept in ``packing_error``).
        ``at_once``: whole frames, no wait for a pause (:meth:`pack_at_turn_end`).
        """

        def pause() -> bool:
            if not at_once:
                self._wait_for_pause()
            return not self._closing.is_set()

        try:
            self.wait_for_training()
            if at_once:
                if pause():
                    self.pack_cold(pause=pause, whole=True)
            elif pause():
                often = self.db.is_postgresql  # (PACK_EVERY_POSTGRESQL): whole frames only
                self.pack_cold(keep_loose=PACK_KEEP_LOOSE, pause=pause, whole=often)
                if often:  # the newest PACK_KEEP_LOOSE are still loose: counted again
                    self._since_pack += PACK_KEEP_LOOSE
            self.runs.merge_heads(self.db, pause)
            self.packing_error = None
        except BaseException as err:  # kept for the caller to see; tried again later
            self.packing_error = err
        finally:
            with self._trainer_lock:
                self._packer = None

    def merge_runs(self) -> int:
        """Merge every segment's small runs (``db.runmerge``): what ``archive pack`` runs."""
        return self.runs.merge_every(self.db)

    def wait_for_packing(self, timeout: float | None = None) -> bool:
        """Block until a background packing this archive started has finished (or ``timeout``
        seconds passed); True when none is running any more.
        """
        with self._trainer_lock:
            packer = self._packer
        return joined(packer, timeout)

    def close(self) -> None:
        """Stop the background packer at its next frame and let a training finish."""
        super().close()
        self.wait_for_packing()

    def pack_cold(
        self,
        *,
        keep_loose: int = 0,
        pause: Callable[[], bool] | None = None,
        whole: bool = False,
    ) -> PackReport:
        """Pack the cold loose blobs (:meth:`PackWriting.pack_cold`), first training the
        frames a better dictionary when the archive has outgrown its own (see
        :data:`PACK_TRAIN_SAMPLES`).

        Raises:
            UsageError: called inside a transaction.
        """
        if self.db.in_transaction():
            raise UsageError("packing runs its own transactions: call it outside one")
        with self._pack_lock:
            self._train_for_packing()
            report = super().pack_cold(keep_loose=keep_loose, pause=pause, whole=whole)
            self._since_pack = 0  # what was written so far is packed
            if keep_loose == 0 and not whole:  # ...and what an import's one transaction wrote
                self._pending_new = 0
            return report

    def frames_ahead(self, conn: Connection, *, behind: bool = False) -> FramesAhead:
        """The frame compressor of one import writing packed in ``conn`` (``store_packed``'s
        ``ahead``; see :mod:`alpstore.archive.ahead`). ``behind``: frames compressed on a
        thread while the import reads on; the caller calls its ``finish`` before it commits.
        """
        return FramesAhead(self, conn, dict_size=DICT_SIZE, behind=behind)

    def store_packed(
        self,
        conn: Connection,
        items: Sequence[Encoded],
        ahead: FramesAhead | None = None,
        *,
        known: dict[bytes, int] | None = None,
        probe: bool = True,
    ) -> int:
        """Store ``items`` (in conversation order) packed, inside the caller's transaction:
        those not stored yet and at most :data:`PACK_BLOB_MAX` bytes become one frame, each
        blob's row pointing into it from the start; the rest are left to the caller. The count
        of blobs stored.

        An import on PostgreSQL writes its small messages this way, a frame's worth at a time,
        before the turns that refer to them (``importers.import_history``): their rows are
        then written once, never loose first and rewritten packed, which there leaves each
        loose version in the heap (1.65x raw at 400 turns became 2.16x when the settle packed
        them, issue 33); on SQLite since issue 41 (compressing each byte once, not loose and
        then again into frames). The frame uses the archive's dictionary, if it has one, at
        ``PACK_LEVEL``; with ``ahead`` (an import's, :meth:`frames_ahead`) its compressor.
        On PostgreSQL the import takes ``db.members.NEW_BLOBS_LOCK`` exclusive (until it
        commits) before it looks the items up: a loose writer or another import storing the
        same new content waits for it, or it for them, and a digest is stored once.

        ``known``: gets the id of every small item, found or inserted (locked in this
        transaction: ``store_encoded_counted``'s ``known``, so the turns that follow need not
        look them up again).

        ``probe`` False: none of ``items`` is stored yet, as the caller knows (an SQLite import
        holding the write lock into an archive that held no blob at its start, whose file
        repeats no digest): they are not looked up.
        """
        wanted = {d: (d, k, r) for d, k, r in items if len(r) <= PACK_BLOB_MAX}
        if wanted and not self.db.is_sqlite:  # the frame's members are new content
            rsql.execute(conn, LOCK_NEW_BLOBS, defer=True)  # its own statement, before
        have = self.ids_for(conn, list(wanted), lock=True) if wanted and probe else {}
        if known is not None:
            known.update(have)
        fresh = [item for d, item in wanted.items() if d not in have]
        if not fresh:
            return 0
        content = b"".join(raw for _, _, raw in fresh)
        if ahead is None:
            codec, dict_id, data = self._compress_frame(content)
        elif ahead.behind:  # the row now, its data when the thread has compressed it
            codec, dict_id = ahead.choose([raw for _, _, raw in fresh])
            data = b""
        else:
            codec, dict_id, data = ahead.compress([raw for _, _, raw in fresh], content)
        offsets, at = [], 0
        for _, _, raw in fresh:
            offsets.append(at)
            at += len(raw)
        # the members' ids in content order (0010: no row of their own; the frame describes
        # them, and ids first_id, first_id + 1, ... need no list)
        new_ids = self._new_blob_ids(conn, len(fresh))
        members = [
            (bid, digest, kind, off)
            for bid, (digest, kind, _), off in zip(new_ids, fresh, offsets, strict=True)
        ]
        if ahead is not None:  # the frame in flight filled in first (FramesAhead.fill)
            ahead.fill()
        frame_id = self._insert_frame(conn, content, codec, dict_id, len(fresh), data, members)
        if ahead is not None and ahead.behind:
            ahead.compress_behind(frame_id, content)
        del content, data  # (an import's memory holds one frame's turns: no more copies)
        if known is not None:
            known.update((m[1], m[0]) for m in members)
        return len(members)

    def _train_for_packing(self) -> int | None:
        """Train a new dictionary from the newest ``min(small blobs, PACK_TRAIN_SAMPLES)``
        small blobs when the archive's newest dictionary learned from fewer than half as many
        (or there is none), there are loose small blobs to pack, and automatic training is
        on; the id trained, or None.

        A live writer trains its dictionary once, from the first :data:`AUTO_TRAIN_SAMPLES`
        small blobs; the frames packed from a conversation many times that size compress much
        better with one learned from more of it (1,000-turn benchmark corpus, 192 KB frames:
        230 KB with the 1,000-sample dictionary, 206 KB with 5,787 samples). New loose blobs
        use the new dictionary too; frames and blobs written with the older one keep it.
        """
        if not self.auto_train:
            return None
        self.wait_for_training()
        with self.db.read() as conn:
            # the loose small blobs, and every frame's members (all small; those under 16
            # bytes, which the samples leave out, counted too: a frame's row sums them whole)
            loose_n, loose = rsql.fetchone(
                conn,
                "SELECT count(*), coalesce(sum(raw_size), 0) FROM blob_rows "
                f"WHERE {SAMPLE_WHERE} AND codec != {CODEC_PACKED}",
            )
            packed_n, packed_bytes = rsql.fetchone(
                conn,
                "SELECT coalesce(sum(blob_count), 0), coalesce(sum(raw_size), 0) FROM pack_frames",
            )
            small = int(loose_n) + int(packed_n)
            small_bytes = int(loose) + int(packed_bytes)
            newest = rsql.fetchone(
                conn,
                "SELECT sample_count FROM zstd_dicts WHERE purpose = 0 ORDER BY id DESC LIMIT 1",
            )
        # as many as fit in the trainer's memory bound, at the small blobs' average size
        fit = TRAIN_SAMPLE_BYTES * int(small) // max(1, int(small_bytes))
        want = min(int(small), PACK_TRAIN_SAMPLES, max(AUTO_TRAIN_SAMPLES, fit))
        if not loose or want < AUTO_TRAIN_SAMPLES:
            return None  # nothing to pack, or too little to learn from
        if newest is not None and 2 * int(newest[0]) >= want:
            return None
        dict_id, used, _ = self.train_dictionary(samples=want, recompress=False)
        return dict_id if used else None

    def settle(self, *, pack: bool = True, compact: bool = False) -> Settled:
        """After a bulk write that ran in one transaction (an import), in the caller's
        thread: train the dictionary it deferred, pack the cold blobs (with that dictionary),
        and compact the SQLite file (see :meth:`compact`). ``pack`` False: recompress the small
        blobs with the new dictionary instead (``DictionaryTraining.settle``). ``compact``:
        compact the file even when nothing was trained or packed (an import that wrote packed:
        ``VACUUM`` rebuilds the indexes it filled in digest order with full pages, 2 % of the
        file at 1,000 turns).

        Raises:
            UsageError: called inside a transaction.
        """
        if not pack:
            return super().settle()
        if self.db.is_postgresql:
            # Packing rewrites every small blob's row once; PostgreSQL keeps the old versions in
            # the heap until later inserts reuse them, so right after an import it grows the
            # schema (1.65x -> 2.12x raw at 400 turns, benchmarks/RESULTS.md, issue 33). There
            # the dictionary is trained for the blobs to come and nothing is rewritten;
            # `alpstore archive pack` packs on demand.
            trained, _ = self.train_deferred(recompress=False)
            return Settled(trained, 0, 0, 0, None)
        trained, _ = self.train_deferred(recompress=False)
        packed = self.pack_cold()
        before, after = self.compact() if packed.frames or trained or compact else (0, 0)
        return Settled(trained, 0, before, after, packed)

    def stats(self) -> ArchiveStats:
        """Counts and sizes of the stored blobs."""
        from sqlalchemy import Integer, func, select

        from alpstore.db.tables import blobs, zstd_dicts

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
        total, raw, _, msgs, sums, dicted = (int(x) for x in row)
        packs = self.frame_stats()
        return ArchiveStats(
            blobs=total,
            messages=msgs,
            summaries=sums,
            other=total - msgs - sums,
            raw_bytes=raw,
            stored_bytes=packs.loose_bytes + packs.frame_bytes,
            dictionaries=ndicts,
            dict_compressed=dicted,
            loose_bytes=packs.loose_bytes,
            packed_blobs=packs.packed_blobs,
            frames=packs.frames,
            packed_bytes=packs.frame_bytes,
            dead_fraction=packs.dead_fraction,
            dict_frames=packs.dict_frames,
        )

    def verify(self) -> VerifyReport:
        """Decode and check every dictionary row; decompress and re-hash every blob; check
        sizes, codecs and summary references.
        """
        report = VerifyReport()
        bad: list[tuple[int, bytes, str]] = []
        with self.db.read() as conn:
            report.problems.extend(self._verify_dictionaries(conn))
            try:  # (rows_checked counts view segments, not frames)
                report.problems.extend(self.verify_frames(conn)[1])
            except Exception as exc:  # a damaged file: a finding, and the blobs are checked on
                report.problems.append(
                    Problem(what=f"pack frames could not be read ({type(exc).__name__}: {exc})")
                )
            for rows in self._every_blob(conn, report):
                for row in rows:
                    report.blobs_checked += 1
                    digest = bytes(row.digest)
                    try:
                        if row.codec not in (
                            CODEC_RAW,
                            CODEC_ZSTD,
                            CODEC_ZSTD_DICT,
                            CODEC_ZSTD_BASE,
                            CODEC_PACKED,
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

    def _every_blob(self, conn: Connection, report: VerifyReport) -> Iterator[list[BlobRow]]:
        """Every blob's row, :data:`CHUNK` at a time: the loose rows by id, then each frame's
        members from its description (0010). On SQLite a frame whose members' digest keys
        are not all in ``pack_digests`` is a finding (a lookup by digest would miss them).
        """
        last = 0
        while True:
            loose = rsql.fetchall(
                conn, f"{LOOSE_SELECT} WHERE id > ? ORDER BY id LIMIT ?", (last, CHUNK)
            )
            if not loose:
                break
            last = int(loose[-1][0])
            yield [BlobRow(*r) for r in loose]
        frame_ids = [
            int(r[0]) for r in rsql.fetchall(conn, "SELECT id FROM pack_frames ORDER BY id")
        ]
        for frame_id in frame_ids:
            row = rsql.fetchone(
                conn, f"SELECT {DESCRIPTION} FROM pack_frames WHERE id = ?", (frame_id,)
            )
            if row is None:
                continue
            try:
                frame = Described(row)
                members = frame.rows()
            except (ValueError, TypeError) as exc:
                report.problems.append(
                    Problem(
                        what=f"pack frame {frame_id}: its members' description is damaged ({exc})"
                    )
                )
                continue
            if self.db.is_sqlite:
                keys = {
                    int(k)
                    for (k,) in rsql.fetchall(
                        conn, "SELECT prefix FROM pack_digests WHERE frame_id = ?", (frame_id,)
                    )
                }
                lost = [m for m in members if digest_key(bytes(m[1])) not in keys]
                if lost:
                    report.problems.append(
                        Problem(
                            what=f"pack frame {frame_id}: {len(lost)} member(s) missing from "
                            "pack_digests (not found by digest)",
                            digest=bytes(lost[0][1]).hex(),
                        )
                    )
            yield [BlobRow(*m) for m in members]

    def _verify_dictionaries(self, conn: Connection) -> list[Problem]:
        """Every ``zstd_dicts`` row decoded and checked against its digest as stored now, with
        a decompressor of its own: a process that loaded a dictionary before its row was
        damaged still decodes blobs from its own copy, and would not see the damage there.
        """
        from sqlalchemy import func, select

        from alpstore.archive.columns import DICT_ROW
        from alpstore.db.tables import blobs, zstd_dicts

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
        from sqlalchemy import select

        from alpstore.db.tables import blob_refs

        covers = doc.get("covers") if isinstance(doc, dict) else None
        children = [
            int(c)
            for c in conn.execute(
                select(blob_refs.c.child_id)
                .where(blob_refs.c.parent_id == blob_id)
                .order_by(blob_refs.c.position)
            ).scalars()
        ]
        found = {int(r[0]): bytes(r[1]) for r in rows_by_id(conn, children)} if children else {}
        refs = [found.get(c, b"") for c in children]
        if covers != [bytes(r).hex() for r in refs]:
            raise IntegrityError(
                f"summary {digest.hex()}: covered list does not match its stored references"
            )
