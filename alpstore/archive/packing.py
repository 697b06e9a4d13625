"""Packing cold blobs (issue 33): loose blobs rewritten, in conversation order (ascending id:
the order they were stored), into zstd frames of about :data:`FRAME_TARGET` bytes of content,
one ``pack_frames`` row each; each blob's row then points into its frame
(:mod:`alpstore.archive.frames`).

Which blobs are cold: every loose blob up to :data:`PACK_BLOB_MAX` bytes (a larger one
compresses well alone and would make a frame that every read of its neighbours pays for) and,
for the background packer, not among the newest ``keep_loose`` (the turns a live writer may
still read back at once). An explicit ``alpstore archive pack`` and the end of an import pack
them all. Deltas are packed too, whole: their bases are their neighbours in conversation order,
so the frame's compression finds what the delta held (measured on the 1,000-turn benchmark
corpus: frames + loose deltas 309 KB before, 239 KB with deltas packed), and a packed delta no
longer needs its base (``base_id`` is cleared).

Each frame is one short transaction — the frame row inserted, then its blobs' rows updated only
where they are still loose (a blob `gc` deleted meanwhile is simply absent; one another packer
took first leaves dead bytes in this frame) — so a writer beside the packer waits for one
frame's batch at most, and a kill -9 leaves every blob either loose or packed, never neither.
Frames are compressed before the transaction opens.

GC: :meth:`PackWriting.repack` deletes frames no blob points into and rewrites a frame whose
dead fraction (bytes of blobs deleted since it was written) passes :data:`REPACK_DEAD`.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import zstandard

from alpstore.archive.base import Problem
from alpstore.archive.frames import (
    FrameRow,
    decode_frame,
)
from alpstore.archive.reading import ArchiveReader, BlobRow
from alpstore.codec import (
    CODEC_RAW,
    CODEC_ZSTD,
    CODEC_ZSTD_BASE,
    CODEC_ZSTD_DICT,
    Decompressor,
    digest_bytes,
)
from alpstore.db import raw as rsql
from alpstore.db.members import (
    DESCRIPTION,
    Described,
    digest_key,
    encode_kinds,
    encode_list,
)
from alpstore.errors import IntegrityError, UsageError

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from alpstore.db.database import Database
    from alpstore.db.raw import AnyConnection

FRAME_TARGET = 192 * 1024
"""Content bytes per frame: reading one packed message decompresses this much (≈0.03 ms)."""

PACK_LEVEL = 15
"""zstd level of the frames (with the archive's dictionary when it has one). Measured on the
1,000-turn benchmark corpus (64 KB frames, deltas packed): level 12 261 KB in 0.19 s, 15 239 KB
in 0.40 s, 17 and 19 235 KB in 0.7 s."""

PACK_TRAIN_SAMPLES = 8000
"""A pack run first trains a dictionary from up to this many of the newest small blobs when the
archive's newest one learned from fewer than half as many as it now holds (``SqlArchive.
pack_cold``; training 5,787 samples takes 0.04 s)."""

PACK_BLOB_MAX = 16 * 1024
"""Blobs larger than this stay loose."""

REPACK_DEAD = 0.5
"""A frame whose dead fraction passes this is rewritten by `gc` (its live blobs packed anew)."""

READ_SLICE = 500
"""Loose blobs read and decoded at a time while packing."""

LOOSE_SELECT = (
    "SELECT id, digest, kind, raw_size, codec, dict_id, payload, base_id FROM blob_rows "
    f"WHERE id > ? AND id <= ? "
    f"AND codec IN ({CODEC_RAW}, {CODEC_ZSTD}, {CODEC_ZSTD_DICT}, {CODEC_ZSTD_BASE}) "
    "AND raw_size <= ? ORDER BY id LIMIT ?"
)


@dataclass
class PackReport:
    """What a packing (or a repacking) did."""

    frames: int = 0
    blobs: int = 0
    raw_bytes: int = 0
    stored_before: int = 0
    """The packed blobs' payload bytes while loose."""
    stored_after: int = 0
    """The frames' bytes."""
    frames_deleted: int = 0
    frames_rewritten: int = 0
    dropped: list[int] = field(default_factory=list)
    """The dead members a repack dropped (ids no live blob refers to)."""


@dataclass(frozen=True)
class FrameStats:
    """Loose and packed bytes of an archive (``archive stats``)."""

    loose_blobs: int
    loose_bytes: int
    packed_blobs: int
    frames: int
    frame_bytes: int
    frame_raw: int
    live_raw: int
    dict_frames: int

    @property
    def dead_fraction(self) -> float:
        """Bytes of the frames' content no blob points at any more, as a fraction."""
        return 1.0 - self.live_raw / self.frame_raw if self.frame_raw else 0.0


class PackWriting(ArchiveReader):
    """Packing, repacking and checking frames (``SqlArchive`` is made of it)."""

    db: Database
    _pack_comp: tuple[int | None, zstandard.ZstdCompressor] | None = None
    """The frame compressor and the dictionary it was made with (made once: a dictionary's
    tables take milliseconds to build)."""

    def __init__(self, db: Database, **options: Any) -> None:
        self._compress_lock = threading.Lock()
        """Held while a frame is compressed: a zstd compressor is not thread-safe, and `gc`'s
        repacking may run beside the background packer (two threads on one compressor wrote
        a frame that did not decode to its content, found by the kill -9 torture)."""
        super().__init__(db, **options)

    # ----------------------------------------------------------------- packing
    def pack_cold(
        self,
        *,
        keep_loose: int = 0,
        pause: Callable[[], bool] | None = None,
        whole: bool = False,
    ) -> PackReport:
        """Pack every cold loose blob (see the module docstring), one frame per transaction.

        ``keep_loose``: leave the newest this many blobs loose (the background packer).
        ``pause``: called before each frame is written; it returns once the frame may be
        written, False to stop there (the background packer waits for a pause in its process's
        writes, and stops when the archive closes). ``whole``: the newest blobs that do not
        fill a frame (:data:`FRAME_TARGET`) stay loose for a later packing, instead of a small
        frame of their own (a packing at every few turns: ``SqlArchive.pack_at_turn_end``).

        Raises:
            UsageError: called inside a transaction.
        """
        if self.db.in_transaction():
            raise UsageError("packing runs its own transactions: call it outside one")
        report = PackReport()
        with self.db.read() as conn:
            top = rsql.fetchone(conn, "SELECT max(id) FROM blob_rows")[0]
            starts = sorted(
                (int(a), int(b))
                for a, b in rsql.fetchall(conn, "SELECT first_id, last_id FROM pack_frames")
            )
        upto = int(top or 0) - keep_loose
        last = 0
        batch: list[tuple[BlobRow, bytes]] = []
        size = 0
        while True:
            with self.db.read() as conn:
                params = [last, upto, PACK_BLOB_MAX, READ_SLICE]
                part = [BlobRow(*r) for r in rsql.fetchall(conn, LOOSE_SELECT, params)]
                raws = self.decode_rows(conn, part, verify=False)
            for row, raw in zip(part, raws, strict=True):
                # a loose id inside a frame's id range stays loose, and a frame never spans
                # another's range: the frame that can hold an id is then the one with the
                # greatest first_id below it (0010)
                at = bisect.bisect_right(starts, (row.id, 1 << 62)) - 1
                if at >= 0 and starts[at][1] >= row.id:
                    continue
                if batch and at >= 0 and starts[at][0] > batch[0][0].id:
                    if pause is not None and not pause():
                        return report
                    self._write_frame(batch, report)
                    batch, size = [], 0
                batch.append((row, raw))
                size += len(raw)
                if size >= FRAME_TARGET:
                    if pause is not None and not pause():
                        return report
                    self._write_frame(batch, report)
                    batch, size = [], 0
            if len(part) < READ_SLICE:
                break
            last = part[-1].id
        if batch and not whole and (pause is None or pause()):
            self._write_frame(batch, report)
        return report

    def _compress_frame(self, content: bytes) -> tuple[int, int | None, bytes]:
        with self._compress_lock:
            dict_id = self._codec[0]
            if self._pack_comp is None or self._pack_comp[0] != dict_id:
                if dict_id is None:
                    comp = zstandard.ZstdCompressor(level=PACK_LEVEL)
                else:
                    cdict = zstandard.ZstdCompressionDict(self._dec.dictionary(dict_id))
                    comp = zstandard.ZstdCompressor(level=PACK_LEVEL, dict_data=cdict)
                self._pack_comp = (dict_id, comp)
            data = self._pack_comp[1].compress(content)
        return (CODEC_ZSTD if dict_id is None else CODEC_ZSTD_DICT), dict_id, data

    def _write_frame(self, members: Sequence[tuple[BlobRow, bytes]], report: PackReport) -> None:
        """One frame of ``members`` (rows as read, and their bytes), in one transaction."""
        content = b"".join(raw for _, raw in members)
        codec, dict_id, data = self._compress_frame(content)
        offsets = []
        at = 0
        for _, raw in members:
            offsets.append(at)
            at += len(raw)
        with self.db.atomic() as conn:
            self._insert_frame(
                conn,
                content,
                codec,
                dict_id,
                len(members),
                data,
                [
                    (row.id, bytes(row.digest), row.kind, off)
                    for (row, _), off in zip(members, offsets, strict=True)
                ],
            )
            for part in range(0, len(members), 500):
                ids = [row.id for row, _ in members[part : part + 500]]
                rsql.execute(
                    conn,
                    f"DELETE FROM blob_rows WHERE id IN ({rsql.placeholders(len(ids))})",
                    ids,
                )
        report.frames += 1
        report.blobs += len(members)
        report.raw_bytes += len(content)
        report.stored_before += sum(len(row.payload) for row, _ in members)
        report.stored_after += len(data)

    def _insert_frame(
        self,
        conn: AnyConnection,
        content: bytes,
        codec: int,
        dict_id: int | None,
        count: int,
        data: bytes,
        members: Sequence[tuple[int, bytes, int, int]] = (),
    ) -> int:
        """Insert a frame row describing ``members`` — ``(id, digest, kind, offset)`` in
        content order (0010) — and, on SQLite, its digest keys; its id.
        """
        dialect = "sqlite" if self.db.is_sqlite else "postgresql"
        ids = [m[0] for m in members]
        first = min(ids) if ids else 0
        contiguous = ids == list(range(first, first + len(ids)))
        sql = (
            "INSERT INTO pack_frames (digest, codec, dict_id, raw_size, blob_count, created_at, "
            "data, first_id, last_id, offsets, kinds, ids, digests) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        )
        params = [
            digest_bytes(content),
            codec,
            dict_id,
            len(content),
            count,
            time.time(),
            data,
            first,
            max(ids) if ids else -1,
            encode_list(dialect, [m[3] for m in members]),
            encode_kinds(dialect, [m[2] for m in members]),
            None if contiguous else encode_list(dialect, ids),
            b"".join(m[1] for m in members),
        ]
        if self.db.is_sqlite:
            frame_id = int(rsql.execute(conn, sql, params).lastrowid)
            keys = sorted({digest_key(m[1]) for m in members})
            if keys:
                rsql.executemany(
                    conn,
                    "INSERT OR IGNORE INTO pack_digests (prefix, frame_id) VALUES (?, ?)",
                    [(k, frame_id) for k in keys],
                )
            return frame_id
        return int(rsql.fetchone(conn, sql + " RETURNING id", params)[0])

    def _new_blob_ids(self, conn: AnyConnection, n: int) -> list[int]:
        """``n`` new blob ids from the loose rows' sequence, ascending (never reused)."""
        if n <= 0:
            return []
        if self.db.is_sqlite:  # the writer holds the file: raise the sequence past them
            top = rsql.fetchone(
                conn,
                "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'blob_rows'), "
                "0), coalesce((SELECT max(id) FROM blob_rows), 0))",
            )[0]
            first = int(top) + 1
            rsql.execute(conn, "DELETE FROM sqlite_sequence WHERE name = 'blob_rows'", [])
            rsql.execute(
                conn,
                "INSERT INTO sqlite_sequence (name, seq) VALUES ('blob_rows', ?)",
                [first + n - 1],
            )
            return list(range(first, first + n))
        rows = rsql.fetchall(
            conn, "SELECT nextval('blob_rows_id_seq') FROM generate_series(1, ?)", [n]
        )
        return sorted(int(r[0]) for r in rows)

    # ----------------------------------------------------------------- gc
    def _members(self, conn: AnyConnection) -> dict[int, list[tuple[int, int, int]]]:
        """``{frame id: [(blob id, offset, size)]}`` of every frame's members (0010: read from
        the frames' descriptions, one scan of ``pack_frames`` without its data).
        """
        out: dict[int, list[tuple[int, int, int]]] = {}
        for row in rsql.fetchall(conn, f"SELECT {DESCRIPTION} FROM pack_frames"):
            frame = Described(row)
            out[frame.frame_id] = list(zip(frame.ids, frame.offsets, frame.sizes(), strict=True))
        return out

    def repack(
        self, conn: Connection, live: set[int], *, threshold: float = REPACK_DEAD
    ) -> PackReport:
        """Inside `gc`'s transaction, writers excluded, after its mark (``live``: every blob id
        still reachable): delete each frame no live blob is a member of, and rewrite each whose
        dead fraction passes ``threshold`` into a new frame of its live members (their ids
        and bytes kept: invariant 9, a rewritten frame is a new row). A frame row is never
        changed; a dead member of a frame under the threshold stays (a later write of the same
        content finds and reuses it). ``report.blobs``: the dead members dropped.
        """
        report = PackReport()
        for row in rsql.fetchall(conn, f"SELECT {DESCRIPTION} FROM pack_frames ORDER BY id"):
            frame = Described(row)
            keep = [i for i, bid in enumerate(frame.ids) if bid in live]
            sizes = frame.sizes()
            live_raw = sum(sizes[i] for i in keep)
            if keep and frame.raw_size and 1.0 - live_raw / frame.raw_size <= threshold:
                continue
            kept = set(keep)
            report.dropped += [bid for i, bid in enumerate(frame.ids) if i not in kept]
            report.blobs += len(frame.ids) - len(keep)
            if keep:  # the live part of one frame: one new frame, smaller
                content = self._frame_contents(conn, [frame.frame_id]).get(frame.frame_id)
                if content is None:
                    raise IntegrityError(f"pack frame {frame.frame_id} is missing")
                raws = [content[frame.offsets[i] : frame.offsets[i] + sizes[i]] for i in keep]
                joined = b"".join(raws)
                codec, dict_id, data = self._compress_frame(joined)
                members, at = [], 0
                for i, raw in zip(keep, raws, strict=True):
                    members.append((frame.ids[i], frame.digest(i), frame.kinds[i], at))
                    at += len(raw)
                self._insert_frame(conn, joined, codec, dict_id, len(keep), data, members)
                report.frames_rewritten += 1
            else:
                report.frames_deleted += 1
            rsql.execute(conn, "DELETE FROM pack_frames WHERE id = ?", [frame.frame_id])
            if self.db.is_sqlite:
                rsql.execute(conn, "DELETE FROM pack_digests WHERE frame_id = ?", [frame.frame_id])
        return report

    # ----------------------------------------------------------------- stats, verify
    def frame_stats(self) -> FrameStats:
        """Loose and packed bytes, frames and their dead fraction."""
        with self.db.read() as conn:
            loose = rsql.fetchone(
                conn,
                "SELECT count(*), coalesce(sum(length(payload)), 0) FROM blob_rows",
            )
            frames = rsql.fetchone(
                conn,
                "SELECT count(*), coalesce(sum(length(data)), 0), coalesce(sum(raw_size), 0), "
                f"coalesce(sum(CASE WHEN codec = {CODEC_ZSTD_DICT} THEN 1 ELSE 0 END), 0) "
                "FROM pack_frames",
            )
            known = {int(r[0]) for r in rsql.fetchall(conn, "SELECT id FROM pack_frames")}
            members = self._members(conn)
        live = sum(s for f, m in members.items() if f in known for _, _, s in m)
        return FrameStats(
            loose_blobs=int(loose[0]),
            loose_bytes=int(loose[1]),
            packed_blobs=sum(len(m) for m in members.values()),
            frames=int(frames[0]),
            frame_bytes=int(frames[1]),
            frame_raw=int(frames[2]),
            live_raw=live,
            dict_frames=int(frames[3]),
        )

    def verify_frames(self, conn: AnyConnection) -> tuple[int, list[Problem]]:
        """Decode every frame with a decompressor of its own (a cached copy would hide damage
        done since it was read) and check its size and digest; ``(frames checked, problems)``,
        each problem naming the frame and how many blobs it holds.
        """
        problems = []
        check = Decompressor()
        checked = 0
        members = self._members(conn)
        ids = [int(r[0]) for r in rsql.fetchall(conn, "SELECT id FROM pack_frames ORDER BY id")]
        for frame_id in ids:
            row = rsql.fetchone(
                conn,
                "SELECT id, digest, codec, dict_id, raw_size, data FROM pack_frames WHERE id = ?",
                [frame_id],
            )
            checked += 1
            meta = FrameRow(int(row[0]), bytes(row[1]), int(row[2]), row[3], int(row[4]))
            try:
                if meta.codec == CODEC_ZSTD_DICT and meta.dict_id is not None:
                    self._ensure_dictionary(conn, int(meta.dict_id))
                    check.add_dictionary(int(meta.dict_id), self._dec.dictionary(meta.dict_id))
                elif meta.codec != CODEC_ZSTD:
                    raise IntegrityError(f"pack frame {frame_id}: unknown codec {meta.codec}")
                decode_frame(check, meta, row[5])
            except IntegrityError as exc:
                held = len(members.get(frame_id, ()))
                problems.append(Problem(what=f"{exc} ({held} blob(s) are packed in it)"))
        return checked, problems
