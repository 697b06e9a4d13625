"""Import a deep checkpoint file: streamed, validated, and written in one transaction.

The file is walked with :class:`~alpstore.portable.jsonstream.JsonStream`: each message of the
first agent's ``committed_messages`` (the covering list) and of alpstore's ``covered`` block is
decoded, re-hashed and stored in batches as it is read; everything else (lineage, kernel,
manifest, working memory) is small and checked whole at the end. Every write happens inside
one transaction, so a refusal found late (a bad manifest hash after 4,000 messages, a taken
id, Ctrl-C) rolls back everything. Nothing a file says is trusted: ids and labels are
validated (:mod:`alpstore.rules.ids`), an id may not shadow a local name, a name already
taken is suffixed, integers and nesting are bounded, and every carried digest must match.
Dictionary training never runs inside that transaction: `checkpoint import` calls
``SqlArchive.settle`` after it commits (issue 33).
"""

from __future__ import annotations

import contextlib
import time
from array import array
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from alpstore.archive.ahead import FramesAhead
from alpstore.archive.packing import PACK_BLOB_MAX
from alpstore.archive.sql import Encoded, Packed
from alpstore.codec import digest_bytes, digest_hex
from alpstore.db import raw as rsql
from alpstore.db.names import BLOB_MESSAGE, BLOB_STATE
from alpstore.errors import CanonicalJSONError, CheckpointFileError, UsageError
from alpstore.gcpause import no_gc_pause
from alpstore.portable.deep import (
    IMPORT_TRIGGER,
    Item,
    check_covering_digest,
    comparable_wm,
    decode_item,
    export_kernel,
)
from alpstore.portable.files import (
    canonical_bytes,
)
from alpstore.portable.reading import (
    COMMITTED,
    COVERED,
    Header,
    check_header,
    feed_document,
    open_stream,
    stream_document,
)
from alpstore.rules.ids import shown
from alpstore.rules.names import claim_name
from alpstore.sessions import CheckpointInfo, Session, default_label, new_session_uuid
from alpstore.views import COVER_MOD, View, cover_bytes

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from alpstore.core.store import CoreStore as Store

BATCH_ITEMS: Final = 500
BATCH_BYTES: Final = 16 * 1024 * 1024
"""A batch of messages is stored once it holds this many items or bytes."""
STORED_MAX: Final = 50_000
"""Most message ids an import keeps for repeats (about 8 MB); past it, repeats of earlier
batches are looked up in the archive like any other message."""
VIEW_CHUNK: Final = 20_000
"""The covering list is appended to the new session's view this many entries at a time (the
rows of one statement are built per chunk, not for the whole list)."""


@dataclass
class ImportResult:
    """What an import did.

    Fields:
        session: the session (new, or the existing one when the history was already there).
        checkpoint: the checkpoint that holds the file's state.
        entries: entries in the covering list.
        covered: entries carried for summaries.
        new_blobs: blobs the archive did not hold before (deduplication at work).
        existing: True when the archive already held this session, history and state: nothing
            was written.
        name: the session's name (None when it has none).
        renamed_from: the name the file carried when it was taken here (then ``name`` is the
            suffixed one).
    """

    session: Session
    checkpoint: CheckpointInfo
    entries: int
    covered: int
    new_blobs: int
    existing: bool
    name: str | None = None
    renamed_from: str | None = None


@dataclass
class _Pending:
    """A summary of the covering list, stored once the covered block has been read."""

    item: Item
    where: str


@dataclass
class Importer:
    """Receives a file's messages one by one (storing them when ``conn`` is given), then its
    header; ``conn`` None checks without writing.
    """

    store: Store | None
    conn: Connection | None
    where: str
    parsed: bool = False
    """The messages come from ``json`` (a file streamed), not a caller's objects."""
    ids: array[int] = field(default_factory=lambda: array("q"))
    """The covering list's blob ids, 8 bytes an entry (0 until stored; a summary's at the
    end)."""
    pending: dict[int, _Pending] = field(default_factory=dict)
    """The covering list's summaries by position, stored once the covered block was read."""
    entries: int = 0
    """Entries in the covering list so far."""
    cover_sum: int = 0
    """The covering digest of the entries so far (:func:`~alpstore.views.cover_add`, summed
    as they are read: no list of digests is kept)."""
    known: set[bytes] = field(default_factory=set)
    covered: int = 0
    new_blobs: int = 0
    uncarried: str | None = None
    _batch: list[tuple[int, Encoded]] = field(default_factory=list)
    _batch_bytes: int = 0
    _ahead: tuple[list[tuple[int, Encoded]], Future[Packed]] | None = None
    """The batch being compressed on the packing thread, stored when the next one is full."""
    _packer: ThreadPoolExecutor | None = None
    _frames: FramesAhead | None = None
    """The compressor of the import's frames (made at the first batch stored)."""
    _probe: bool = True
    """Look up which of a batch's messages (those this import has not stored itself) are in
    the archive already. Off after a batch whose such messages all turned out new (an import
    into an archive without them), on again after one where some were not."""
    _stored: dict[bytes, int] = field(default_factory=dict)
    """The blob ids of the messages stored so far (up to :data:`STORED_MAX`), for repeats:
    valid in the import's one transaction (rows it inserted or locked cannot go before it
    ends), dropped with it."""

    # ---------------------------------------------------------------- messages
    def message(self, obj: Any, index: int) -> None:
        """One entry of the covering list."""
        where = f"{COMMITTED}[{index}]"
        item = decode_item(obj, where, parsed=self.parsed)
        if not item.carried and self.uncarried is None:
            self.uncarried = where
        slot = self.entries
        self.cover_sum += int.from_bytes(item.digest, "big") * (2 * slot + 1)
        self.entries += 1
        self.ids.append(0)
        if item.kind == "summary":
            self.pending[slot] = _Pending(item, where)
            return
        self._add(slot, item)

    @property
    def cover(self) -> int:
        """The covering digest of the covering list (as a number)."""
        return self.cover_sum % COVER_MOD

    def covered_item(self, obj: Any, index: int) -> None:
        """One entry of the covered block (children before the summaries covering them)."""
        where = f"{COVERED}[{index}]"
        item = decode_item(obj, where, parsed=self.parsed)
        self._note_carried(item, where)
        self.covered += 1
        if item.kind == "summary":
            self._require_known(item, where, "a covered summary refers to")
            self.flush()
            if self.conn is not None:
                assert self.store is not None
                self.store.archive.store_summary(self.conn, item.text, item.covers)
        else:
            self._add(-1, item)
        self.known.add(item.digest)

    def _note_carried(self, item: Item, where: str) -> None:
        if not item.carried and self.uncarried is None:
            self.uncarried = where

    def _require_known(self, item: Item, where: str, what: str) -> None:
        for d in item.covers:
            if d not in self.known:
                raise CheckpointFileError(
                    f"{self.where}: {where}: {what} {digest_hex(d)[:12]}…, which the file does "
                    "not carry before it",
                    hint="deep files carry every entry a summary covers",
                )

    def _add(self, slot: int, item: Item) -> None:
        if self.conn is None:
            return
        self._batch.append((slot, (item.digest, BLOB_MESSAGE, item.raw)))
        self._batch_bytes += len(item.raw)
        if self._batch_bytes >= BATCH_BYTES:
            self.flush()
        elif len(self._batch) >= BATCH_ITEMS:
            self._rotate()

    def _rotate(self) -> None:
        """Hand the full batch to the packing thread and store the one before it: the next
        messages are read while zstd compresses these (it works without the interpreter lock).
        Only batches of small messages go ahead so (a batch of :data:`BATCH_BYTES` is stored
        at once): at most two batches of them are held at a time.
        """
        assert self.store is not None
        batch, self._batch, self._batch_bytes = self._batch, [], 0
        if self._packer is None:
            self._packer = ThreadPoolExecutor(1, thread_name_prefix="alpstore-import")
        ahead = self._ahead
        # the small ones are stored packed, a frame a batch (``_store``): only the large ones
        # are compressed ahead, loose
        items = [enc for _, enc in batch if len(enc[2]) > PACK_BLOB_MAX]
        self._ahead = (batch, self._packer.submit(self.store.archive.pack, items))
        if ahead is not None:
            self._store(*ahead)

    def flush(self) -> None:
        """Store the batches of messages read so far."""
        if self.conn is None:
            return
        if self._ahead is not None:
            ahead, self._ahead = self._ahead, None
            self._store(*ahead)
        if self._batch:
            batch, self._batch, self._batch_bytes = self._batch, [], 0
            self._store(batch, None)

    def _store(self, batch: list[tuple[int, Encoded]], packed: Future[Packed] | None) -> None:
        assert self.store is not None and self.conn is not None
        items = [enc for _, enc in batch]
        unknown = len({digest for digest, _, _ in items if digest not in self._stored})
        archive = self.store.archive
        if self._frames is None:
            self._frames = archive.frames_ahead(self.conn, behind=True)
        # small messages packed from the start, a frame a batch (issue 41): compressed once
        framed = archive.store_packed(self.conn, items, self._frames)
        ids, fresh = archive.store_encoded_counted(
            self.conn,
            items,
            packed=None if packed is None else packed.result(),
            probe=self._probe or framed > 0,
            known=self._stored if len(self._stored) < STORED_MAX else None,
        )
        self._probe = framed + fresh < unknown
        self.new_blobs += framed + fresh
        for (slot, _), blob_id in zip(batch, ids, strict=True):
            if slot >= 0:
                self.ids[slot] = blob_id

    def close(self) -> None:
        """Stop the packing thread (waiting for a batch it is compressing; nothing else runs
        on it). The import's transaction is the caller's to end.
        """
        self._ahead = None
        if self._packer is not None:
            self._packer.shutdown(wait=True, cancel_futures=True)
            self._packer = None
        if self._frames is not None:  # (a frame still in flight: the import failed)
            self._frames.abandon()

    def finish_messages(self, is_export: bool) -> array[int]:
        """Store what is pending (summaries last) and return the covering list's blob ids.

        Raises:
            CheckpointFileError: an alpstore export with a message that lost its digest, or a
                summary whose covered entries the file does not carry.
        """
        if is_export and self.uncarried is not None:
            raise CheckpointFileError(
                f"{self.where}: {self.uncarried}: carries no _alpstore.digest, yet this "
                "alpstore export has one in every message",
                hint="the message was edited after export",
            )
        for pending in self.pending.values():
            self._require_known(pending.item, pending.where, "summarises")
        self.flush()
        if self._frames is not None:  # every frame's data in its row
            self._frames.finish()
        if self.conn is None:
            return array("q")
        assert self.store is not None
        for i, pending in self.pending.items():
            before = self.store.archive.ids_for(self.conn, [pending.item.digest])
            sid, _ = self.store.archive.store_summary(
                self.conn, pending.item.text, pending.item.covers
            )
            self.new_blobs += 0 if before else 1
            self.ids[i] = sid
        return self.ids


# ---------------------------------------------------------------------- the target session
class _CheckpointRow(NamedTuple):
    """What :func:`_existing` reads of a checkpoint."""

    id: int
    segment_id: int | None
    length: int
    kernel_blob_id: int | None
    wm_blob_id: int | None


def _id_shadows_name(conn: Connection, uuid: str) -> bool:
    row = rsql.fetchone(conn, "SELECT id FROM sessions WHERE name = ? LIMIT 1", (uuid,))
    return row is not None


def _same_state(store: Store, conn: Connection, ck_row: Any, head: Header) -> bool:
    ids = [i for i in (ck_row.kernel_blob_id, ck_row.wm_blob_id) if i is not None]
    loaded = store.archive.load_by_ids(conn, ids) if ids else {}
    kernel = loaded[ck_row.kernel_blob_id][2] if ck_row.kernel_blob_id is not None else None
    wm = loaded[ck_row.wm_blob_id][2] if ck_row.wm_blob_id is not None else None
    return export_kernel(kernel) == export_kernel(head.kernel) and comparable_wm(
        wm
    ) == comparable_wm(head.working_memory)


def _existing(
    store: Store, conn: Connection, sid: int, ids: array[int], head: Header
) -> CheckpointInfo | None:
    """The checkpoint of session ``sid`` that holds exactly this history and state; None when
    no checkpoint holds this history.

    Raises:
        UsageError: the history is there but the state differs (refused with a hint).
    """
    rows = [
        _CheckpointRow(*r)
        for r in rsql.fetchall(
            conn,
            "SELECT id, segment_id, length, kernel_blob_id, wm_blob_id FROM checkpoints "
            "WHERE session_id = ? AND length = ? ORDER BY seq DESC",
            (sid, len(ids)),
        )
    ]
    uuid = str(rsql.fetchone(conn, "SELECT uuid FROM sessions WHERE id = ?", (sid,))[0])
    history = False
    for row in rows:
        if array("q", store.views.read_ids(conn, View(row.segment_id, int(row.length)))) != ids:
            continue
        history = True
        if _same_state(store, conn, row, head):
            return store.get_checkpoint(int(row.id))
    if history:
        raise UsageError(
            f"session {uuid} already holds this history, with a different kernel or working "
            "memory; nothing imported",
            hint="use --fork to keep the file's state as a new session",
        )
    return None


def _origin(head: Header, source_name: str, fork: bool, manifest_given: bool) -> dict[str, Any]:
    origin: dict[str, Any] = {"source": "checkpoint-file", "file": source_name}
    origin["manifest"] = "argument" if manifest_given else "file"
    if head.lineage is not None:
        lineage = dict(head.lineage)
        if fork:
            lineage = {
                "parent_session_id": head.session_id,
                "forked_from_checkpoint": source_name,
                "root_session_id": head.lineage.get("root_session_id") or head.session_id,
                "created_at": None,
            }
        origin["lineage"] = lineage
    if head.backtrack_count and not fork:
        origin["backtrack_count"] = head.backtrack_count
    if head.fields:
        origin["fields"] = head.fields
    return origin


@dataclass(frozen=True)
class Options:
    """What the caller asked for: see :func:`import_file`."""

    source_name: str
    fork: bool = False
    session_id: str | None = None
    name: str | None = None
    manifest: dict[str, Any] | None = None
    manifest_hash: str | None = None


def _state_ids(store: Store, conn: Connection, head: Header, where: str) -> list[int | None]:
    out: list[int | None] = []
    for value, what in ((head.kernel, "$.kernel"), (head.working_memory, "$.working_memory")):
        if value is None:
            out.append(None)
            continue
        try:
            raw = canonical_bytes(value, f"{where}: {what}")
        except CanonicalJSONError as exc:
            raise CheckpointFileError(f"{where}: {what}: {exc.message}") from exc
        (blob_id,) = store.archive.store_encoded(conn, [(digest_bytes(raw), BLOB_STATE, raw)])
        out.append(blob_id)
    return out


def _write(
    store: Store, conn: Connection, imp: Importer, head: Header, opts: Options, cover: int
) -> Any:
    """Create (or find) the session and its checkpoint, inside the import's transaction;
    ``cover`` is the covering digest of the file's messages (:func:`~alpstore.views.cover_add`).
    """
    if head.version == 1 and opts.manifest is None:
        raise UsageError(
            f"{opts.source_name}: a version 1 checkpoint holds only a kernel; pass --manifest"
        )
    if opts.session_id is not None and not opts.fork:
        raise UsageError("--session-id applies to a fork; an import keeps the file's session id")
    ids = imp.finish_messages(head.is_export)
    uuid: str | None = None
    if head.version == 2 and not opts.fork:
        uuid = head.session_id
        assert uuid is not None
        row = rsql.fetchone(conn, "SELECT id FROM sessions WHERE uuid = ?", (uuid,))
        if row is not None:
            ck = _existing(store, conn, int(row[0]), ids, head)
            if ck is None:
                raise UsageError(
                    f"session {uuid} already exists in this archive with a different history",
                    hint="use --fork to load the file as a new session",
                )
            return ck
        if _id_shadows_name(conn, uuid):
            raise UsageError(
                f"{opts.source_name}: its session id {shown(uuid)} is the name of another "
                "session here; refused (it would take that name over)",
                hint="use --fork to load the file as a new session with a fresh id",
            )
    elif opts.fork:
        uuid = opts.session_id or new_session_uuid()  # create_session refuses a local name
    wanted = opts.name if opts.name is not None else head.name
    name = claim_name(conn, store, wanted, suffix=opts.name is None) if wanted else None
    session = store.create_session(
        session_id=uuid,
        name=name,
        manifest=opts.manifest if opts.manifest is not None else head.manifest,
        origin=_origin(head, opts.source_name, opts.fork, opts.manifest is not None),
    )
    view = View(None, 0)
    for start in range(0, len(ids), VIEW_CHUNK):  # grows the one new segment in place
        view = store.views.append(conn, view, session.id, ids[start : start + VIEW_CHUNK])
    rsql.execute(
        conn,
        "UPDATE sessions SET head_segment_id = ?, head_length = ?, turn = ?, status = ?, "
        "updated_at = ?, head_digest = ? WHERE id = ?",
        (
            view.segment_id,
            view.length,
            head.turn,
            "active",
            time.time(),
            cover_bytes(cover),
            session.id,
        ),
    )
    info = store.session_info(session.id, conn=conn)
    kernel_id, wm_id = _state_ids(store, conn, head, opts.source_name)
    ck = store.insert_checkpoint(
        conn,
        info,
        view,
        turn=head.turn,
        label=head.label or default_label(head.turn),
        trigger=IMPORT_TRIGGER,
        kernel_id=kernel_id,
        wm_id=wm_id,
        cover=cover,
    )
    return (Session(store, info), ck, name)


def _require_manifest(doc: dict[str, Any], opts: Options, where: str) -> None:
    if opts.manifest_hash is None:
        return
    found = doc.get("manifest")
    if not isinstance(found, dict) or found.get("content_hash") != opts.manifest_hash:
        raise CheckpointFileError(
            f"{where}: does not embed the manifest it was chosen for (changed since?); "
            "nothing imported"
        )


class _Unchanged(Exception):
    """Raised inside the import's transaction to roll it back: the archive already held it."""

    def __init__(self, checkpoint: CheckpointInfo) -> None:
        super().__init__(checkpoint.id)
        self.checkpoint = checkpoint


def _run(
    store: Store,
    feed: Callable[[Importer], dict[str, Any]],
    opts: Options,
    where: str,
    *,
    parsed: bool,
) -> ImportResult:
    imp = Importer(store, None, where, parsed)
    try:
        with contextlib.closing(imp), no_gc_pause(), store.db.atomic() as conn:
            imp.conn = conn
            doc = feed(imp)
            head = check_header(doc, where=where)
            _require_manifest(doc, opts, where)
            cover = imp.cover  # the new head's covering digest (issue 13)
            check_covering_digest(doc, cover_bytes(cover), where)
            done = _write(store, conn, imp, head, opts, cover)
            if isinstance(done, CheckpointInfo):  # already here: write nothing at all
                raise _Unchanged(done)
            session, ck, name = done
    except _Unchanged as same:
        ck = same.checkpoint
        session = store.get_session(ck.session)
        found = session.info().name
        return ImportResult(session, ck, imp.entries, imp.covered, 0, True, found)
    store.emit_checkpoint(ck)
    renamed = head.name if opts.name is None and name != head.name else None
    return ImportResult(session, ck, imp.entries, imp.covered, imp.new_blobs, False, name, renamed)


def import_file(
    store: Store,
    path: Path,
    *,
    fork: bool = False,
    session_id: str | None = None,
    name: str | None = None,
    manifest: dict[str, Any] | None = None,
    manifest_hash: str | None = None,
) -> ImportResult:
    """Import a deep file (``.json`` or ``.json.zst``), streaming it, in one transaction.

    Keeps the file's session id (validated; it may not shadow a local name) unless ``fork``
    (then ``session_id`` or a new one, with the file's session as parent). The name the file
    carries travels with it; taken here, it is suffixed (``demo-2``). ``name`` overrides it and
    is refused when taken. When the archive already holds the session with this history and
    state, nothing is written (``existing``); with another state, the import is refused.
    Version 1 needs ``manifest`` (LC-6). ``manifest_hash``: the file must embed the manifest
    of this hash (auto-resume chose it by its header; a file swapped since is refused).

    Raises:
        NotFoundError, CheckpointFileError, UsageError: nothing was written.
    """
    opts = Options(path.name, fork, session_id, name, manifest, manifest_hash)
    with open_stream(path) as js:
        return _run(store, lambda imp: stream_document(js, imp), opts, str(path), parsed=True)


def import_document(
    store: Store,
    doc: dict[str, Any],
    *,
    source_name: str,
    fork: bool = False,
    session_id: str | None = None,
    name: str | None = None,
    manifest: dict[str, Any] | None = None,
) -> ImportResult:
    """:func:`import_file` for a document already in memory."""
    opts = Options(source_name, fork, session_id, name, manifest)
    if not isinstance(doc, dict):
        raise CheckpointFileError(f"{source_name}: a checkpoint file must hold a JSON object")
    return _run(store, lambda imp: feed_document(doc, imp), opts, source_name, parsed=False)
