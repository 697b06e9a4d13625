"""A store's content reads: hydrated views and checkpoints, states, backtracks and events.

Plain SQL through :mod:`alpstore.db.raw` (no SQLAlchemy on this path), on the connection
``db.read()`` gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from alpstore.archive.reading import parse_raws
from alpstore.codec import Digest, parse_json
from alpstore.core.reads import StoreReads
from alpstore.db import raw as rsql
from alpstore.db.members import rows_by_id
from alpstore.db.names import BLOB_STATE, BLOB_SUMMARY
from alpstore.errors import IntegrityError, NotFoundError
from alpstore.gcpause import no_gc_pause
from alpstore.sessions import CheckpointInfo, Entry
from alpstore.sessions.records import steering_text
from alpstore.views import READ_RANGE_SIZES, View, clip, common_prefix, cover_of, fetch_range

if TYPE_CHECKING:
    from sqlalchemy import Connection


def _entries(digests: list[Digest], kinds: list[int], raws: list[bytes]) -> list[Entry]:
    """Entries from their digests, kinds and canonical bytes: one JSON parse for the batch, and
    when none is a summary, the entries made by C-level loops (issue 41: a 6,001-message
    hydrate built them one by one in ~2 ms).
    """
    with no_gc_pause():  # documents and entries by the thousand: acyclic
        values = parse_raws(raws, digests)
        if BLOB_SUMMARY not in kinds:
            return list(
                map(
                    tuple.__new__,
                    repeat(Entry),
                    zip(digests, repeat("message"), values, repeat(())),
                )
            )
        out: list[Entry] = []
        for digest, kind, value in zip(digests, kinds, values, strict=True):
            if kind == BLOB_SUMMARY:
                covers = tuple(Digest(bytes.fromhex(h)) for h in value.get("covers", []))
                out.append(Entry(digest, "summary", value, covers))
            else:
                out.append(Entry(digest, "message", value))
        return out


class StoreContent(StoreReads):
    """What views and checkpoints hold, hydrated."""

    def hydrate_view(self, view: View, *, verify: bool = False) -> list[Entry]:
        """The entries of a view, in order: one joined range scan per segment, one JSON parse
        per batch.
        """
        return self.entries_of(self.hydrate_raw(view, verify=verify))

    @staticmethod
    def entries_of(raws: list[tuple[Digest, int, bytes]]) -> list[Entry]:
        """Entries from ``(digest, kind, canonical JSON bytes)`` triples (one JSON parse per
        batch).
        """
        return _entries(
            list(map(itemgetter(0), raws)), list(map(itemgetter(1), raws)), [r[2] for r in raws]
        )

    def hydrate_raw(self, view: View, *, verify: bool = False) -> list[tuple[Digest, int, bytes]]:
        """The entries of a view as ``(digest, kind, canonical JSON bytes)``, unparsed.

        What a deep export or a streaming reader needs: no JSON parse, no objects per entry.
        """
        if view.length == 0:
            return []
        with self.db.read() as conn:
            return self._hydrate_raw(conn, view, verify=verify)

    def _hydrate_raw(
        self, conn: Connection, view: View, *, verify: bool
    ) -> list[tuple[Digest, int, bytes]]:
        digests, kinds, raws = self._hydrate_columns(conn, view, verify=verify)
        return list(zip(digests, kinds, raws, strict=True))

    def _hydrate_columns(
        self, conn: Connection, view: View, *, verify: bool
    ) -> tuple[list[Digest], list[int], list[bytes]]:
        """The entries of a view as three lists: digests, kinds, canonical bytes."""
        with no_gc_pause():  # rows by the thousand: acyclic
            rows = self.views.read_blob_rows(conn, view) if view.length else []
            raws = self.archive.decode_rows(conn, rows, verify=verify)
            digests: list[Digest] = list(map(bytes, map(itemgetter(1), rows)))  # type: ignore[arg-type]
            return digests, list(map(itemgetter(2), rows)), raws

    def hydrate(self, checkpoint: CheckpointInfo, *, verify: bool = False) -> list[Entry]:
        """The covering list a checkpoint points at, hydrated.

        The checkpoint row is re-read in the same snapshot: a checkpoint retention or another
        process removed is reported, never read through a view whose entries may be gone.
        ``verify``: every blob re-hashed, and the list checked against the checkpoint's
        covering digest (a swapped or reordered entry is named).

        Raises:
            NotFoundError: the checkpoint no longer exists.
            IntegrityError: damaged content, or (``verify``) a list that does not match.
        """
        with self.db.read() as conn:
            row = rsql.fetchone(
                conn,
                "SELECT segment_id, length, covering_digest FROM checkpoints WHERE id = ?",
                (checkpoint.id,),
            )
            if row is None:
                raise NotFoundError(f"no checkpoint {checkpoint.id} in this archive")
            view = View(row[0], int(row[1]))
            digests, kinds, raws = self._hydrate_columns(conn, view, verify=verify)
        recorded = None if row[2] is None else bytes(row[2])
        if verify and recorded is not None and cover_of(digests) != recorded:
            raise IntegrityError(
                f"checkpoint {checkpoint.id}: its covering list does not match its recorded "
                "digest (an entry was swapped, lost or reordered)",
                hint="`alpstore archive verify` names every checkpoint affected",
            )
        return _entries(digests, kinds, raws)

    def expand(self, entry: Entry) -> list[Entry]:
        """The entries a summary covers (one level), hydrated."""
        if entry.kind != "summary":
            return [entry]
        with self.db.read() as conn:
            ids = self.archive.ids_for(conn, list(entry.covers))
            loaded = self.archive.load_by_ids(conn, ids.values())
        out = []
        for d in entry.covers:
            digest, kind, value = loaded[ids[d]]
            covers = (
                tuple(Digest(bytes.fromhex(h)) for h in value.get("covers", []))
                if (kind == BLOB_SUMMARY)
                else ()
            )
            out.append(
                Entry(digest, "summary" if kind == BLOB_SUMMARY else "message", value, covers)
            )
        return out

    def checkpoint_state(self, checkpoint: CheckpointInfo) -> tuple[Any | None, Any | None]:
        """The kernel and working-memory documents stored with a checkpoint."""
        with self.db.read() as conn:
            row = rsql.fetchone(
                conn,
                "SELECT kernel_blob_id, wm_blob_id FROM checkpoints WHERE id = ?",
                (checkpoint.id,),
            )
            if row is None:
                raise NotFoundError(f"no checkpoint {checkpoint.id} in this archive")
            ids = [int(i) for i in row if i is not None]
            loaded = self.archive.load_by_ids(conn, ids)
        kernel = loaded[row[0]][2] if row[0] is not None else None
        wm = loaded[row[1]][2] if row[1] is not None else None
        return kernel, wm

    def digests_for_ids(self, conn: Connection, ids: Sequence[int]) -> list[Digest]:
        """The digests of blob ids, in order."""
        found: dict[int, Digest] = {}
        unique = list(dict.fromkeys(ids))
        for start in range(0, len(unique), 500):
            part = unique[start : start + 500]
            for row in rows_by_id(conn, part):
                found[int(row[0])] = Digest(bytes(row[1]))
        return [found[i] for i in ids]

    def session_backtracks(self, session_id: int) -> list[dict[str, Any]]:
        """A session's backtracks, oldest first, with their steering text."""
        with self.db.read() as conn:
            rows = rsql.fetchall(
                conn,
                "SELECT id, steps, from_checkpoint_id, to_checkpoint_id, automatic, "
                "error_signature, created_at, steering_blob_id FROM backtracks "
                "WHERE session_id = ? ORDER BY id",
                (session_id,),
            )
            out = []
            for bt, steps, src, dst, automatic, signature, at, steering_id in rows:
                steering = None
                if steering_id is not None:
                    msg = self.archive.load_by_ids(conn, [int(steering_id)])
                    steering = steering_text(msg[int(steering_id)][2])
                out.append(backtrack_doc(bt, steps, src, dst, automatic, signature, at, steering))
        return out

    def session_events(self, session_id: int) -> list[dict[str, Any]]:
        """A session's recorded events, oldest first."""
        with self.db.read() as conn:
            rows = rsql.fetchall(
                conn,
                "SELECT kind, checkpoint_id, created_at, detail FROM session_events "
                "WHERE session_id = ? ORDER BY id",
                (session_id,),
            )
        return [
            {
                "kind": kind,
                "checkpoint": checkpoint,
                "at": at,
                "detail": parse_json(detail, where="event") if detail else {},
            }
            for kind, checkpoint, at, detail in rows
        ]

    def put_state(self, value: Any) -> Digest:
        """Store a kernel/working-memory document; return its digest."""
        return self.archive.put(value, BLOB_STATE)


def checkpoint_deltas(store: StoreContent, cks: list[CheckpointInfo]) -> dict[int, tuple[int, int]]:
    """For each checkpoint, ``(entries, bytes)`` its view adds over the previous one: the bytes
    are the added entries' canonical JSON sizes (``raw_size``), what the session holds and not how
    this archive compresses it, so an exported and imported session logs the same figures.
    """
    out: dict[int, tuple[int, int]] = {}
    with store.db.read() as conn:
        previous: list[tuple[int, int, int]] = []
        for ck in cks:
            chain = store.views.chain(conn, ck.view)
            start = common_prefix(previous, chain)
            entries = total = 0
            for seg, lo, hi in clip(chain, start):
                sizes = fetch_range(conn, READ_RANGE_SIZES, seg, lo, hi)
                entries += len(sizes)
                total += sum(int(r[0]) for r in sizes)
            out[ck.id] = (entries, total)
            previous = chain
    return out


def backtrack_doc(
    bt: Any, steps: Any, src: Any, dst: Any, automatic: Any, signature: Any, at: Any, steering: Any
) -> dict[str, Any]:
    """One ``backtracks`` row as the reads return it (``steering``: the steering text or None)."""
    return {
        "backtrack": int(bt),
        "steps": int(steps),
        "from_checkpoint": src,
        "to_checkpoint": dst,
        "automatic": bool(automatic),
        "error_signature": signature,
        "steering": steering,
        "at": float(at),
    }
