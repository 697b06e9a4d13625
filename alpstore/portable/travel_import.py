"""Import a session file (``alpstore.session``, see ``travel``) into an archive, in one transaction.

Into SQLite the file is read once, inside one write transaction that checks every line as it
writes it (``SessionReader``): a refused line rolls everything back (a run-root archive the
command created for it is removed again, ``sqlitefile.discard_new_archives``). Into PostgreSQL
it is read twice: once with no archive (every check), then inside the write transaction, each
run of lines compared with the seals of the first read (the file may have changed in between).

Checkpoint and backtrack numbers: `session log` prints checkpoint ids, which are archive-wide, and a
file's ids are not in its digest, so they are claims, never trusted. The import keeps the file's ids
only when every one of them (its checkpoints', its backtracks', and the ids its references name a
checkpoint the session no longer holds by) lies above the highest id this archive has ever handed
out (SQLite's ``sqlite_sequence``, PostgreSQL's sequence; ids are never reused, so that is the only
way an id is free) and at most ``travel_ids.KEEP_ID_BOUND`` (a file cannot move this archive's
sequences near their end). On PostgreSQL those ids are reserved before the first row is written, in
a short transaction of their own that holds the table against writers while it moves the sequence
past them (PostgreSQL's sequences do not wait for the import's commit: a live writer checkpointing
meanwhile gets the next free id). On SQLite the import's own transaction holds the write lock from
its first statement, so the decision is made there, at the first id of each table the file names
(the ids after it come in increasing order, but for references by id); an id after it that
contradicts it (below the high water mark, or past the bound) rolls the transaction back and the
file is read again with that table renumbered — the same outcome as deciding on the whole file
first. Otherwise the rows are numbered here as any new rows are, and a reference by id only gets a
fresh id no row holds (the session digest does not change; `session log`'s numbers do), and the
result says so. A reference by id always stays inside the imported session.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from alpstore import fileio
from alpstore.archive.base import summary_document
from alpstore.archive.packing import FRAME_TARGET
from alpstore.canonical import digest_bytes
from alpstore.db import raw as rsql
from alpstore.db.names import BLOB_SUMMARY
from alpstore.db.runs import insert_runs
from alpstore.errors import IntegrityError, UsageError
from alpstore.gcpause import no_gc_pause
from alpstore.portable.travel import Checked, SessionReader, check_session_file
from alpstore.portable.travel_format import KIND_CODES, portable_dir, with_dir
from alpstore.portable.travel_ids import (
    DecidedHere,
    Renumber,
    Reserved,
    fresh_id,
    reserve_ids,
)
from alpstore.rules.ids import check_text
from alpstore.rules.names import normal_name
from alpstore.views import EMPTY, EMPTY_COVER, GROW, View

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from alpstore.core.store import CoreStore as Store

BATCH_ITEMS: Final = 1024
BATCH_BYTES: Final = FRAME_TARGET
"""A batch of blobs is stored at this many blobs or bytes: about one frame of the small ones
(issue 41: they are stored packed, a frame a batch)."""

INSERT_CHECKPOINTS: Final = (
    "INSERT INTO checkpoints ({id}session_id, seq, turn, segment_id, length, kernel_blob_id, "
    "wm_blob_id, label, trigger, abandoned, created_at, covering_digest) VALUES {values} "
    "RETURNING id, seq"
)
CHECKPOINT_VALUES: Final = "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?"
CHECKPOINT_ROWS: Final = 100
"""Checkpoints held and inserted together (13 parameters a row: well within either driver's
limit)."""
INSERT_BACKTRACK: Final = (
    "INSERT INTO backtracks ({id}session_id, from_checkpoint_id, to_checkpoint_id, steps, "
    "steering_blob_id, automatic, error_signature, created_at) VALUES ({q}?, ?, ?, ?, ?, ?, ?, ?)"
)


@dataclass(frozen=True)
class SessionImport:
    """What an import wrote.

    Fields:
        session: the session id (kept from the file).
        name: its name here; ``file_name`` the file's (they differ when that one was taken).
        digest: the session digest (equal to the exporting archive's).
        checkpoints, blobs: lines imported; ``inserted`` the blobs this archive lacked.
        ids_kept: the checkpoint and backtrack numbers are the file's.
        parent: the parent session linked as the fork's source, or None (not here, or a root).
        orphaned: the file names a parent this archive lacks (imported as a root session).
    """

    session: str
    name: str | None
    file_name: str | None
    digest: str
    checkpoints: int
    blobs: int
    inserted: int
    ids_kept: bool
    parent: str | None
    orphaned: bool
    threads: tuple[str, ...] = ()
    """The LangGraph thread ids restored (the saver resumes them here)."""
    framework_lost: str | None = None
    """A framework's thread the session held that this import cannot restore (the file
    carries none of its rows), said in words; None when there is none."""


def _local_origin(text: str | None, root: Path) -> str | None:
    """The file's ``origin`` for this run root: a recorded policy's checkpoint directory (kept
    relative to the run root in the file, checked by the reader) under this one.
    """
    if not text:
        return text
    origin = json.loads(text)
    folder = portable_dir(origin)
    if folder is None:
        return text
    local = fileio.inside_root(root / folder, root)
    return json.dumps(with_dir(origin, str(local)), sort_keys=True)


class _Writer:
    def __init__(
        self,
        store: Store,
        conn: Connection,
        name: str | None,
        ids: tuple[Reserved | DecidedHere, Reserved | DecidedHere],
    ) -> None:
        self.store = store
        self.conn = conn
        self.name = name
        self.ids: dict[bytes, int] = {}
        self.batch: list[tuple[Any, int, bytes]] = []
        self.batch_bytes = 0
        self.inserted = 0
        self.sid = 0
        self.uuid = ""
        self.file_name: str | None = None
        self.final_name: str | None = None
        self.parent: str | None = None
        self.orphaned = False
        self.seq_ids: dict[int, int] = {}
        self.view: View = EMPTY
        self.cks, self.bts = ids
        """Whether the file's checkpoint / backtrack ids are kept (see the module)."""
        self.held: list[tuple[bool, dict[str, Any], int, list[int]]] = []
        """Checkpoints that only append, not written yet: ``(own id, line, at, blob ids)``."""
        self.tip: tuple[int | None, int] | None = None
        """``(segment, length)``: the tip of the segment the import appended to last."""
        self.fresh: dict[int, int] = {}
        """A reference by id only (a checkpoint the session no longer holds), renumbered: the
        file's id → a fresh id no checkpoint holds."""
        self.probe = not (
            store.db.is_sqlite and rsql.fetchone(conn, "SELECT 1 FROM blobs LIMIT 1") is None
        )
        """Whether a batch's blobs are looked up before they are stored packed: not in an
        SQLite archive that held no blob when this transaction (which holds the write lock)
        began, as the file's blob lines are stored before any other row that may hold a blob
        and the reader refuses a digest that comes twice."""
        self.origin: Any = None
        self.lg: Any = None
        """The ``travel_lg.ThreadWriter`` of the file's LangGraph thread lines, if any."""
        # one compressor for the import's frames, compressing on a thread as the import reads
        self.ahead = store.archive.frames_ahead(conn, behind=True)

    # ---------------------------------------------------------------- blobs
    def blob(self, rec: dict[str, Any], raw: bytes) -> None:
        digest = bytes.fromhex(rec["digest"])
        kind = KIND_CODES[rec["kind"]]
        if kind == BLOB_SUMMARY:
            self.flush()
            value = rec["value"]
            covers = [bytes.fromhex(c) for c in value["covers"]]
            if digest_bytes(raw) != digest or summary_document(value["summary"], covers) != value:
                raise IntegrityError(f"summary {rec['digest'][:16]}… does not re-derive")
            had = self.store.archive.ids_for(self.conn, [digest])
            sid, stored = self.store.archive.store_summary(self.conn, value["summary"], covers)
            self.inserted += 0 if had else 1
            if stored != digest:
                raise IntegrityError(f"summary {rec['digest'][:16]}… does not re-derive")
            self.ids[digest] = sid
            return
        self.batch.append((digest, kind, raw))
        self.batch_bytes += len(raw)
        if len(self.batch) >= BATCH_ITEMS or self.batch_bytes >= BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Store the batch: its small blobs packed from the start, a frame of them
        (``SqlArchive.store_packed``, issue 41: compressed once, never loose first), the rest
        loose; then every blob's id (the packed ones' as the frame found or stored them, not
        looked up again).
        """
        if not self.batch:
            return
        archive = self.store.archive
        known: dict[bytes, int] = {}
        self.inserted += archive.store_packed(
            self.conn, self.batch, self.ahead, known=known, probe=self.probe
        )
        ids, inserted = archive.store_encoded_counted(self.conn, self.batch, known=known)
        self.inserted += inserted
        for (digest, _, _), blob_id in zip(self.batch, ids, strict=True):
            self.ids[digest] = blob_id
        self.batch, self.batch_bytes = [], 0

    def blob_id(self, hexd: str | None) -> int | None:
        return None if hexd is None else self.ids[bytes.fromhex(hexd)]

    # ---------------------------------------------------------------- the session
    def session(self, rec: dict[str, Any]) -> None:

        self.flush()
        st, conn = self.store, self.conn
        self.uuid = rec["uuid"]
        st._require_free_id(conn, self.uuid)
        self.file_name = rec["name"]
        if self.name is not None:
            st._require_free_name(conn, self.name)
            name: str | None = self.name
        elif rec["name"] is not None:
            name = st.available_name(conn, rec["name"])
            st._require_free_name(conn, name)
        else:
            name = None
        self.final_name = name
        self.origin = json.loads(rec["origin"]) if rec["origin"] else None
        parent_id = source_id = root_id = None
        anchor = rec["parent"]
        if anchor is not None:
            row = rsql.fetchone(
                conn,
                "SELECT s.id, s.root_id, c.id, c.covering_digest FROM sessions s JOIN "
                "checkpoints c ON c.session_id = s.id WHERE s.uuid = ? AND c.seq = ?",
                (anchor["session"], anchor["seq"]),
            )
            # a parent claim holds only with the covering digest of that checkpoint here: a
            # file cannot make a session a fork child of one it shares no history with (and
            # pin that session's checkpoint against its retention)
            same = (
                row is not None
                and anchor["covering"] is not None
                and row[3] is not None
                and bytes(row[3]).hex() == anchor["covering"]
            )
            if row is not None and same:
                parent_id, root_id, source_id = int(row[0]), row[1] or row[0], int(row[2])
                self.parent = anchor["session"]
            else:
                self.orphaned = True
        self.sid = st._insert_session(
            conn,
            name,
            {
                "uuid": self.uuid,
                "name": name,
                "parent_id": parent_id,
                "source_checkpoint_id": source_id,
                "root_id": root_id,
                "origin": _local_origin(rec["origin"], st.root),
                "manifest_blob_id": self.blob_id(rec["manifest"]),
                "status": rec["status"],
                "head_segment_id": None,
                "head_length": 0,
                "turn": rec["turn"],
                "backtrack_count": rec["backtrack_count"],
                "retention_mode": rec["retention"]["mode"],
                "retention_n": rec["retention"]["n"],
                "created_at": rec["created_at"],
                "updated_at": rec["updated_at"],
                "head_digest": EMPTY_COVER,
            },
        )
        if root_id is None:
            rsql.execute(conn, "UPDATE sessions SET root_id = ? WHERE id = ?", (self.sid, self.sid))

    def _view(self, rec: dict[str, Any]) -> View:
        self.flush_checkpoints()  # (the segments as the held checkpoints leave them)
        views = self.store.views
        base = views.cut(self.conn, self.view, rec["keep"]) if rec["keep"] else EMPTY
        view = views.append(
            self.conn, base, self.sid, [self.ids[bytes.fromhex(d)] for d in rec["add"]]
        )
        if rec["add"]:  # appended: at the tip of the segment it names (grown or new)
            self.tip = (view.segment_id, view.length)
        return view

    def checkpoint(self, rec: dict[str, Any]) -> None:
        """A checkpoint that only appends at the tip of the segment the last one grew (a
        turn: most of a file's checkpoints) is held and written with the ones after it
        (:meth:`flush_checkpoints`); any other its own way.
        """
        own = self.cks.claim(rec["id"])
        at = self.view.length
        if (
            rec["add"]
            and rec["keep"] == at
            and self.tip == (self.view.segment_id, at)
            and (not self.held or self.held[-1][0] == own)
        ):
            ids = [self.ids[bytes.fromhex(d)] for d in rec["add"]]
            self.view = View(self.view.segment_id, at + len(ids))
            self.tip = (self.view.segment_id, self.view.length)
            self.held.append((own, rec, at, ids))
            if len(self.held) >= CHECKPOINT_ROWS:
                self.flush_checkpoints()
            return
        view = self._view(rec)
        self._insert_checkpoints(own, [(rec, view)])
        self.view = view

    def flush_checkpoints(self) -> None:
        """Write the held checkpoints: their segment grown once (at its tip, as
        ``ViewStore.append`` grows it), one run per checkpoint's entries (the same rows as
        one append each), the checkpoints in one multi-row insert.

        Raises:
            IntegrityError: the segment was not at the tip the checkpoints were held at.
        """
        if not self.held:
            return
        held, self.held = self.held, []
        seg = self.view.segment_id
        assert seg is not None
        first, last = held[0], held[-1]
        end = last[2] + len(last[3])
        grown = rsql.execute(self.conn, GROW, (end, seg, first[2]))
        if grown.rowcount != 1:  # pragma: no cover - a segment this import made and holds
            raise IntegrityError(f"segment {seg} moved while the import wrote it")
        insert_runs(self.conn, seg, [(at, ids) for _, _, at, ids in held])
        self._insert_checkpoints(
            first[0], [(rec, View(seg, at + len(ids))) for _, rec, at, ids in held]
        )

    def _insert_checkpoints(self, own: bool, rows: list[tuple[dict[str, Any], View]]) -> None:
        """Insert checkpoints (the file's ids when ``own``) in one statement."""
        params: list[Any] = []
        for rec, view in rows:
            params += (
                *((rec["id"],) if own else ()),
                self.sid,
                rec["seq"],
                rec["turn"],
                view.segment_id,
                view.length,
                self.blob_id(rec["kernel"]),
                self.blob_id(rec["wm"]),
                rec["label"],
                rec["trigger"],
                rec["abandoned"],
                rec["created_at"],
                bytes.fromhex(rec["covering"]),
            )
        values = ", ".join([f"({'?, ' if own else ''}{CHECKPOINT_VALUES})"] * len(rows))
        sql = INSERT_CHECKPOINTS.format(id="id, " if own else "", values=values)
        for ck_id, seq in rsql.fetchall(self.conn, sql, params):
            self.seq_ids[int(seq)] = int(ck_id)

    def head(self, rec: dict[str, Any]) -> None:
        view = self._view(rec)
        rsql.execute(
            self.conn,
            "UPDATE sessions SET head_segment_id = ?, head_length = ?, head_digest = ? "
            "WHERE id = ?",
            (view.segment_id, view.length, bytes.fromhex(rec["covering"]), self.sid),
        )

    def _ref(self, ref: dict[str, int] | None) -> int | None:
        """A checkpoint reference here, always inside the imported session: by seq, else (a
        checkpoint the session no longer has) the file's id when ids are kept (reserved for
        this import: no other row holds it), else a fresh id no checkpoint holds.
        """
        if ref is None:
            return None
        if "seq" in ref:
            return self.seq_ids[ref["seq"]]
        if self.cks.claim(ref["id"], ref=True):
            return int(ref["id"])
        if ref["id"] not in self.fresh:
            self.fresh[ref["id"]] = fresh_id(self.store, self.conn, "checkpoints")
        return self.fresh[ref["id"]]

    def backtrack(self, rec: dict[str, Any]) -> None:
        self.flush_checkpoints()
        own = self.bts.claim(rec["id"])
        to = self._ref(rec["to"])
        assert to is not None  # the schema: a backtrack goes somewhere
        rsql.execute(
            self.conn,
            INSERT_BACKTRACK.format(id="id, " if own else "", q="?, " if own else ""),
            (
                *((rec["id"],) if own else ()),
                self.sid,
                self._ref(rec["from"]),
                to,
                rec["steps"],
                self.blob_id(rec["steering"]),
                rec["automatic"],
                rec["error_signature"],
                rec["created_at"],
            ),
        )

    def event(self, rec: dict[str, Any]) -> None:
        self.flush_checkpoints()
        rsql.execute(
            self.conn,
            "INSERT INTO session_events (session_id, checkpoint_id, kind, detail, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            (self.sid, self._ref(rec["checkpoint"]), rec["kind"], rec["detail"], rec["created_at"]),
        )

    # ---------------------------------------------------------------- a LangGraph thread
    def _threads(self) -> Any:
        self.flush_checkpoints()
        if self.lg is None:
            from alpstore.portable.travel_lg import ThreadWriter

            self.flush()  # a subgraph's checkpoints take fresh ids: above every reserved one

            def blob_id(hexd: str) -> int:
                return self.ids[bytes.fromhex(hexd)]

            self.lg = ThreadWriter(self.store, self.conn, self.sid, self.seq_ids, blob_id)
        return self.lg

    def lg_thread(self, rec: dict[str, Any]) -> None:
        self._threads().thread(rec)

    def lg_checkpoint(self, rec: dict[str, Any]) -> None:
        self._threads().checkpoint(rec)

    def lg_write(self, rec: dict[str, Any]) -> None:
        self._threads().write(rec)

    def framework_lost(self) -> str | None:
        """What framework thread the session held that the file does not let this import
        restore (None: none, or restored).
        """
        origin = self.origin if isinstance(self.origin, dict) else {}
        graph = origin.get("langgraph")
        if isinstance(graph, dict) and self.lg is None:
            return (
                f"LangGraph thread {str(graph.get('thread_id'))[:80]!r}: the file carries none "
                "of its LangGraph rows (exported by an older alpstore), so AlpstoreSaver does "
                "not see it here"
            )
        agents = origin.get("openai_agents")
        if isinstance(agents, dict) and self.final_name != self.file_name:
            return (
                f"Agents SDK session {str(agents.get('session_id'))[:80]!r}: the name "
                f"{self.file_name!r} is taken here, so AlpstoreSession "
                f"({str(agents.get('session_id'))[:80]!r}) keeps using the session that has it"
            )
        return None

    def finish(self) -> None:
        self.flush_checkpoints()
        self.flush()
        self.ahead.finish()  # every frame's data in its row
        if self.lg is not None:
            self.lg.finish()


def import_session_file(
    store: Store, path: Path, *, name: str | None = None, checked: Checked | None = None
) -> SessionImport:
    """Import the session file at ``path`` as a new session with the file's id (one
    transaction). ``name`` overrides the file's name (the rules of `session new`: printable, at
    most 200 characters, one spelling (NFC); refused when taken); the file's name, when taken
    here, gets a ``#2``… suffix. ``checked``: what :func:`check_session_file` gave the caller
    (the file is then read once more, against its seals); without it an SQLite archive reads
    the file once, checking it inside the transaction, and PostgreSQL checks it first.

    Raises:
        NotFoundError, CheckpointFileError, SecretError, PolicyError: the file (nothing written).
        UsageError: the session id is taken here; SessionNameTakenError: ``name`` is taken.
    """
    if name is not None:
        name = normal_name(check_text(name, "--name"))
    if checked is None and store.db.is_sqlite:
        renumber: set[str] = set()
        while True:
            try:
                return _import(store, path, name, None, renumber)
            except Renumber as again:  # (rolled back: read it again, that table renumbered)
                renumber.add(again.table)
    if checked is None:
        checked = check_session_file(path)
    if checked.session is not None:  # refused before anything moves (ids are reserved next)
        with store.db.read() as conn:
            store._require_free_id(conn, checked.session["uuid"])
            store._require_free_name(conn, name)
    return _import(store, path, name, checked, set())


def _import(
    store: Store, path: Path, name: str | None, checked: Checked | None, renumber: set[str]
) -> SessionImport:
    """The import's transaction: with ``checked``, the ids reserved first and the file read
    against its seals; without, the one checking read deciding the ids as it goes
    (``renumber``: the tables whose ids are not kept whatever the file says).
    """
    if checked is not None:
        keep = reserve_ids(store, checked)
    # a checked file's bytes are not checked again; one read alone needs no seals
    reader = SessionReader(path, sealed=checked, seal=checked is not None)
    with store.db.atomic() as conn:
        ids: tuple[Reserved | DecidedHere, Reserved | DecidedHere]
        if checked is not None:
            ids = (
                Reserved(keep[0], checked.checkpoint_ids),
                Reserved(keep[1], checked.backtrack_ids),
            )
        else:
            ids = (
                DecidedHere(store, conn, "checkpoints", renumber="checkpoints" in renumber),
                DecidedHere(store, conn, "backtracks", renumber="backtracks" in renumber),
            )
        w = _Writer(store, conn, name, ids)
        try:
            with no_gc_pause():  # every line's record and value: acyclic, freed by counting
                for kind, rec, raw in reader.records():
                    if kind == "blob":
                        assert raw is not None
                        w.blob(rec, raw)
                    elif kind != "end":
                        getattr(w, kind)(rec)
            w.finish()
        except BaseException:
            w.ahead.abandon()  # (the transaction rolls back)
            raise
        result = SessionImport(
            session=w.uuid,
            name=w.final_name,
            file_name=w.file_name,
            digest=reader.result.digest,
            checkpoints=reader.result.checkpoints,
            blobs=reader.result.blobs,
            inserted=w.inserted,
            ids_kept=w.cks.kept and w.bts.kept,
            parent=w.parent,
            orphaned=w.orphaned,
            threads=tuple(dict.fromkeys(t for t, _ in reader.result.threads)),
            framework_lost=w.framework_lost(),
        )
        store.emit(
            "session_import",
            session=result.session,
            checkpoints=result.checkpoints,
            digest=result.digest,
        )
    store.archive.after_commit()
    if not result.session:
        raise UsageError(f"{path}: holds no session")
    return result
