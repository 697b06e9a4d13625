"""``verify --repair`` (``alpstore archive verify --repair``): drop the damaged blobs nothing
reaches or refers to, in one transaction, and report the rest (split from
:mod:`alpstore.maintenance`, whose reachability walk it uses).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy import Connection, delete, select

from alpstore.archive.base import VerifyReport
from alpstore.db.sweep import blob_root_columns
from alpstore.db.tables import blob_refs, blob_rows, blobs
from alpstore.maintenance import _all_views, _chain, _reachable_blobs, _shapes, _table, verify

if TYPE_CHECKING:
    from alpstore.store import Store


@dataclass
class RepairReport:
    """What ``verify --repair`` dropped, what it had to keep, and the archive's state after.

    Attributes:
        dropped: one line per damaged blob removed (nothing reaches or references it).
        kept: damaged blobs left in place, with the reason (reachable, or still referenced).
        after: a fresh verify of the archive once the repair committed.
    """

    dropped: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    after: VerifyReport = field(default_factory=VerifyReport)


def _live_blobs(conn: Connection) -> set[int]:
    """Every blob a session head, a checkpoint, a row or a live summary or delta still needs."""
    shapes = _shapes(conn)
    need: dict[int, int] = {}
    for view, _, _ in _all_views(conn).items:
        for seg, _lo, hi in _chain(shapes, view):
            need[seg] = max(need.get(seg, 0), hi)
    return _reachable_blobs(conn, set(need), need)


def _referenced(conn: Connection, candidates: set[int]) -> set[int]:
    """The candidates some row refers to, not counting rows owned by other candidates."""
    found: set[int] = set()
    columns = [*blob_root_columns(), ("segment_entries", "blob_id")]
    for table_name, column in columns:
        col = _table(table_name).c[column]
        found.update(int(b) for b in conn.execute(select(col).where(col.is_not(None))).scalars())
    for parent, child in conn.execute(select(blob_refs.c.parent_id, blob_refs.c.child_id)):
        if int(parent) not in candidates:
            found.add(int(child))
    if "base_id" in blob_rows.c:
        for blob_id, base in conn.execute(
            select(blob_rows.c.id, blob_rows.c.base_id).where(blob_rows.c.base_id.is_not(None))
        ):
            if int(blob_id) not in candidates:
                found.add(int(base))
    return found & candidates


def repair(store: Store) -> RepairReport:
    """Drop damaged blobs that nothing reaches or references, in one transaction; report the rest.

    Only blobs that ``verify`` finds damaged are ever removed, and only when no session head,
    checkpoint, view entry, summary, delta or other row refers to them: the repair can lose
    nothing that was still readable or wanted. Damage that is still reachable is listed, not
    touched (restore those from a copy).
    """
    before = verify(store)
    report = RepairReport()
    bad = set(before.bad_blob_ids)
    with store.db.atomic(snapshot=True) as conn:
        store.db.exclude_writers(conn)
        rows = {
            int(i): bytes(d)
            for i, d in conn.execute(select(blobs.c.id, blobs.c.digest).where(blobs.c.id.in_(bad)))
        }
        live = _live_blobs(conn) & bad
        loose = {
            int(i)
            for i in conn.execute(select(blob_rows.c.id).where(blob_rows.c.id.in_(bad))).scalars()
        }
        packed = bad - live - loose  # a frame member: its frame row is never changed (0010)
        candidates = bad - live - packed
        while True:  # a dropped summary or delta may free the damaged blobs it referred to
            held = _referenced(conn, candidates)
            if not held:
                break
            candidates -= held
        for blob_id in sorted(bad):
            name = f"blob {rows[blob_id].hex()}" if blob_id in rows else f"blob id {blob_id}"
            if blob_id in candidates:
                report.dropped.append(f"dropped damaged {name}: nothing reaches or refers to it")
            elif blob_id in packed:
                report.kept.append(
                    f"kept damaged {name}: it is packed in a frame, which is never changed "
                    "(`alpstore archive gc` drops it with its frame once nothing refers to it)"
                )
            elif blob_id in live:
                report.kept.append(f"kept damaged {name}: a session or checkpoint still needs it")
            else:
                report.kept.append(
                    f"kept damaged {name}: unreachable rows still refer to it "
                    "(`alpstore archive gc` removes them together)"
                )
        doomed = sorted(candidates)
        for start in range(0, len(doomed), 500):
            part = doomed[start : start + 500]
            conn.execute(delete(blob_refs).where(blob_refs.c.parent_id.in_(part)))
            conn.execute(delete(blob_rows).where(blob_rows.c.id.in_(part)))
    report.after = verify(store)
    return report


__all__ = ["RepairReport", "repair"]
