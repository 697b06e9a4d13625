"""The compaction snapshot ``AlpstoreSession`` offers the OpenAI Agents SDK.

``OpenAIResponsesCompactionSession`` compacts automatically only over a backend that answers its
private ``_get_compaction_snapshot(limit, *, prune_prefix=None)`` hook (``SQLiteSession``,
``AsyncSQLiteSession`` and ``SQLAlchemySession`` do): a bounded read of the latest ``limit`` items,
whether that read is the whole history, and an atomic ``replace_suffix(start, output)`` that
swaps the items from ``start`` on for the compacted output, or refuses (returns False) when the
stored history changed since the read. ``EncryptedSession`` passes ``prune_prefix``, a test for
expired envelopes: the replacement also drops the leading run of items it accepts, stopping at the
first it does not (rows under another key are kept).

Here the read is the session's head (an immutable view) and its latest entries; the replacement
is one transaction that re-reads the head under the session's row lock, refuses unless it is the
view the snapshot read (any append, pop or clear in between moved it), and moves the head to the
kept prefix plus the stored output — checkpointed like an ``add_items``. Earlier checkpoints keep
the history compaction replaced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from agents.memory.session import _CompactionSnapshot

from alpstore.archive.reading import encode
from alpstore.db.names import BLOB_MESSAGE
from alpstore.views import View, cover_add

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from alpstore.sessions import Entry, Session

Decode = Callable[["Entry"], Any]
PrunePrefix = Callable[[Any], bool]


def read_snapshot(
    session: Session,
    limit: int,
    *,
    decode: Decode,
    store_items: Callable[[list[Any]], list[Any]],
    prune_prefix: PrunePrefix | None,
    trigger: str | None,
) -> _CompactionSnapshot:
    """The latest ``limit`` items of ``session`` and the replacement bound to that read.

    ``decode`` turns an entry into the item the SDK sees; ``store_items`` turns the SDK's output
    items into what is stored (``add_items``'s own encoding); ``trigger``: checkpoint the
    replacement with this trigger (None: move the head only).
    """
    info = session.info()
    head = info.head
    entries = session.store.hydrate_view(head)
    window = entries[-limit:] if limit > 0 else []
    base = len(entries) - len(window)
    items = [decode(e) for e in window]
    complete = base == 0

    async def replace_suffix(start: int, output: list[Any]) -> bool:
        if not 0 <= start < len(window):
            return False
        return replace(
            session,
            head,
            base + start,
            store_items(list(output)),
            decode=decode,
            prune_prefix=prune_prefix,
            trigger=trigger,
        )

    return _CompactionSnapshot(items, complete, replace_suffix)


def replace(
    session: Session,
    expected: View,
    at: int,
    output: Sequence[Any],
    *,
    decode: Decode,
    prune_prefix: PrunePrefix | None,
    trigger: str | None,
) -> bool:
    """Replace the head's entries from position ``at`` on with ``output``, in one transaction,
    if the head is still ``expected``; drop the leading run of entries ``prune_prefix`` accepts
    before ``at``. False (nothing written) when the head moved.
    """
    store = session.store
    encoded = [encode(m, BLOB_MESSAGE) for m in output]

    def attempt() -> bool:
        with store.db.atomic() as conn:
            info = session._write(conn)
            if info.head != expected:
                return False
            session._require_writable(info, "compact")
            drop = _expired_run(session, conn, expected, at, decode, prune_prefix)
            rows = store.views.read_blob_rows(conn, expected) if drop else []
            kept_ids = [int(r[0]) for r in rows[drop:at]]
            out_ids = store.archive.store_encoded(conn, encoded)
            if drop:
                view = store.views.append(conn, View(None, 0), info.id, [*kept_ids, *out_ids])
                digests = [bytes(r[1]) for r in rows[drop:at]]
            else:
                view = store.views.append(
                    conn, store.views.cut(conn, expected, at), info.id, out_ids
                )
                digests = store.views.read_digests(conn, expected)[:at]
            cover = cover_add(0, 0, [*digests, *(d for d, _, _ in encoded)])
            session._move_head(conn, info, view, turn=info.turn, cover=cover)
            if trigger is not None:
                session._checkpoint_in(conn, session._info, None, None, None, trigger, None)
            return True

    done = store.db.retrying(attempt, what=f"compact session {session.uuid}")
    store.archive.after_commit()
    return done


def _expired_run(
    session: Session,
    conn: Connection,
    view: View,
    end: int,
    decode: Decode,
    prune_prefix: PrunePrefix | None,
) -> int:
    """How many leading entries before ``end`` ``prune_prefix`` accepts, in a row."""
    if prune_prefix is None or end == 0:
        return 0
    store = session.store
    rows = store.views.read_blob_rows(conn, store.views.cut(conn, view, end))
    raws = store.archive.decode_rows(conn, rows, verify=False)
    entries = store.entries_of([(r[1], int(r[2]), raw) for r, raw in zip(rows, raws, strict=True)])
    run = 0
    for entry in entries:
        if entry.kind != "message" or not prune_prefix(decode(entry)):
            break
        run += 1
    return run
