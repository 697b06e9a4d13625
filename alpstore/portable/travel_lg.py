"""A LangGraph thread in a session file: what ``AlpstoreSaver`` needs to resume it on another
archive, as three more line types after the events (``lg_thread``, ``lg_checkpoint``,
``lg_write``; docs/formats.md).

The session of a thread's root namespace is the file's session; each subgraph namespace of the
thread (its own session, a child of the thread's) travels inside the same file, its messages as
keep + add deltas of its previous checkpoint's list. Packed states are carried as their
documents with every archive-local blob id replaced by the blob's digest (each blob travels as
a blob line), and packed again on import; LangGraph's own ids (checkpoint, parent, task, run)
travel as they are. No LangGraph import: a file is written and read with plain SQL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from alpstore.db import raw as rsql
from alpstore.errors import CheckpointFileError, IntegrityError, UsageError
from alpstore.portable.files import MAX_INT
from alpstore.portable.lgrows import (
    folded_steps,
    id_bytes,
    id_text,
    pack_doc,
    session_name,
    unpack_doc,
)
from alpstore.views import EMPTY, EMPTY_COVER, View

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from alpstore.core.store import CoreStore as Store

HEX64: Final = r"^[0-9a-f]{64}$"
_TEXT = {"type": "string", "maxLength": 1000}
_OPT_TEXT = {"type": ["string", "null"], "maxLength": 1000}
_DIGEST = {"type": "string", "pattern": HEX64}
_COUNT = {"type": "integer", "minimum": 0, "maximum": MAX_INT}


def _obj(props: dict[str, Any], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"type": {"type": "string"}, **props},
        "required": ["type", *(p for p in props if p not in optional)],
        "additionalProperties": False,
    }


LG_SCHEMAS: Final[dict[str, dict[str, Any]]] = {
    "lg_thread": _obj(
        {
            "thread_id": _TEXT,
            "ns": _TEXT,
            "created_at": {"type": ["number", "null"], "minimum": 0},
        }
    ),
    "lg_checkpoint": _obj(
        {
            "ns": _TEXT,
            "checkpoint_id": _TEXT,
            "parent": _OPT_TEXT,
            "run": _OPT_TEXT,
            "state": {"type": "object"},
            "seq": {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_INT},
            "ck": {
                "oneOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "properties": {
                            "turn": _COUNT,
                            "label": _OPT_TEXT,
                            "trigger": _OPT_TEXT,
                            "abandoned": {"type": "boolean"},
                            "created_at": {"type": "number", "minimum": 0},
                            "keep": _COUNT,
                            "add": {"type": "array", "items": _DIGEST},
                            "covering": _DIGEST,
                        },
                        "required": [
                            "turn",
                            "label",
                            "trigger",
                            "abandoned",
                            "created_at",
                            "keep",
                            "add",
                            "covering",
                        ],
                        "additionalProperties": False,
                    },
                ]
            },
        }
    ),
    "lg_write": _obj(
        {
            "ns": _TEXT,
            "checkpoint_id": _TEXT,
            "task_id": _TEXT,
            "doc": {"type": "object"},
            "items": {"type": "array", "items": _DIGEST},
        }
    ),
}
LG_ORDER: Final = ("lg_thread", "lg_checkpoint", "lg_write")
"""The order the thread's line types come in (after the events, before the end line)."""

_INSERT_CHECKPOINT: Final = (
    "INSERT INTO checkpoints (session_id, seq, turn, segment_id, length, kernel_blob_id, "
    "wm_blob_id, label, trigger, abandoned, created_at, covering_digest) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"
)

Delta = Callable[[View, list[tuple[int, int, int]]], tuple[dict[str, Any], Any]]
"""``(view, previous chain) -> ({keep, add, covering}, chain)``: a view as a delta of the
previous one in the same namespace (``travel_export._delta`` bound to its namespace's lists)."""


def digest_doc(rec: dict[str, Any]) -> dict[str, Any]:
    """What of a thread line enters the session digest: all of it but a namespace checkpoint's
    keep + add (the exporting archive's sharing), whose list its covering digest stands for.
    """
    if rec["type"] == "lg_checkpoint" and rec["ck"] is not None:
        ck = {k: v for k, v in rec["ck"].items() if k not in ("keep", "add")}
        return {**rec, "ck": ck}
    return rec


def _folded_rows(conn: Any, folded: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Folded steps (``lgrows.folded_steps``) in the shape of the export's checkpoint rows."""
    alp = [int(f[3]) for f in folded]
    cks: dict[int, tuple[Any, ...]] = {}
    runs: dict[int, str] = {}
    for at in range(0, len(alp), 500):
        part = alp[at : at + 500]
        sql = (
            "SELECT id, session_id, segment_id, length, turn, label, trigger, abandoned, "
            f"created_at FROM checkpoints WHERE id IN ({rsql.placeholders(len(part))})"
        )
        cks.update({int(r[0]): tuple(r) for r in rsql.fetchall(conn, sql, part)})
    refs = sorted({int(f[2]) for f in folded if f[2] is not None})
    if refs:
        sql = f"SELECT id, run_id FROM lg_runs WHERE id IN ({rsql.placeholders(len(refs))})"
        runs = {int(r[0]): str(r[1]) for r in rsql.fetchall(conn, sql, refs)}
    return [
        (cid, parent, None if run is None else runs.get(int(run)), *packed, *cks[a])
        for cid, parent, run, a, packed in folded
        if a in cks
    ]


def _state_blob_ids(state: Any) -> list[int]:
    refs = state.get("v", {}) if isinstance(state, dict) else {}
    return [int(r[2]) for r in refs.values() if isinstance(r, list) and r[:1] == ["b"]]


def _map_state(state: dict[str, Any], to: Callable[[Any], Any]) -> dict[str, Any]:
    """``state`` with each blob ref's third item mapped (ids ↔ digests)."""
    refs = {
        ch: ([*r[:2], to(r[2])] if isinstance(r, list) and r[:1] == ["b"] else r)
        for ch, r in state.get("v", {}).items()
    }
    return {**state, "v": refs}


# ---------------------------------------------------------------------- export
def thread_records(
    store: Store,
    conn: Any,
    session_id: int,
    seqs: dict[int, int],
    blob: Callable[[bytes], str],
    delta: Callable[[], Delta],
) -> list[dict[str, Any]]:
    """The thread lines of the session (none when it holds no LangGraph thread).

    ``seqs``: the session's checkpoint ids → seq; ``blob`` notes a blob the file must hold and
    gives its hex digest; ``delta()`` a fresh delta function for one namespace's lists.

    Raises:
        IntegrityError: a row the saver wrote cannot be read back.
    """
    own = rsql.fetchone(
        conn,
        "SELECT id, thread_id, checkpoint_ns FROM lg_threads WHERE session_id = ? ORDER BY id",
        (session_id,),
    )
    if own is None:
        return []
    thread_id, own_ns = str(own[1]), str(own[2])
    spaces: list[tuple[int, str, float | None]] = [(int(own[0]), own_ns, None)]
    if own_ns == "":
        for ref, ns, created in rsql.fetchall(
            conn,
            "SELECT t.id, t.checkpoint_ns, s.created_at FROM lg_threads t JOIN sessions s "
            "ON s.id = t.session_id WHERE t.thread_id = ? AND t.checkpoint_ns <> '' "
            "AND s.status <> 'terminated' ORDER BY t.checkpoint_ns",
            (thread_id,),
        ):
            spaces.append((int(ref), str(ns), float(created)))
    threads = [
        {"type": "lg_thread", "thread_id": thread_id, "ns": ns, "created_at": created}
        for _, ns, created in spaces
    ]
    checkpoints: list[dict[str, Any]] = []
    writes: list[dict[str, Any]] = []
    for ref, ns, created in spaces:
        rows = rsql.fetchall(
            conn,
            "SELECT lc.checkpoint_id, lc.parent_checkpoint_id, r.run_id, lc.codec, lc.dict_id, "
            "lc.raw_size, lc.state, c.id, c.session_id, c.segment_id, c.length, c.turn, c.label, "
            "c.trigger, c.abandoned, c.created_at FROM lg_checkpoints lc "
            "JOIN checkpoints c ON c.id = lc.alp_checkpoint_id "
            "LEFT JOIN lg_runs r ON r.id = lc.run_ref WHERE lc.thread_ref = ? "
            "ORDER BY lc.checkpoint_id",
            (ref,),
        )
        folded, folded_writes = folded_steps(conn, ref)
        if folded:  # the steps its turn rows hold (0011), as loose rows give them
            rows = sorted(rows + _folded_rows(conn, folded), key=lambda r: bytes(r[0]))
        docs = [
            unpack_doc(
                (int(r[3]), r[4], int(r[5]), bytes(r[6])),
                f"LangGraph checkpoint {id_text(bytes(r[0]))} of thread {thread_id!r}",
            )
            for r in rows
        ]
        ck_digests = _digests(store, conn, [i for d in docs for i in _state_blob_ids(d)])

        def ck_blob(blob_id: Any, found: dict[int, bytes] = ck_digests) -> str:
            return blob(found[int(blob_id)])

        ns_delta = delta() if created is not None else None
        previous: Any = []
        for r, doc in zip(rows, docs, strict=True):
            cid = id_text(bytes(r[0]))
            state = _map_state(doc, ck_blob)
            rec: dict[str, Any] = {
                "type": "lg_checkpoint",
                "ns": ns,
                "checkpoint_id": cid,
                "parent": None if r[1] is None else id_text(bytes(r[1])),
                "run": None if r[2] is None else str(r[2]),
                "state": state,
                "seq": None,
                "ck": None,
            }
            if ns_delta is None:
                if int(r[8]) != session_id or int(r[7]) not in seqs:
                    raise IntegrityError(
                        f"LangGraph checkpoint {cid} of thread {thread_id!r} points at "
                        f"checkpoint {r[7]}, not one of its session's"
                    )
                rec["seq"] = seqs[int(r[7])]
            else:
                lists, previous = ns_delta(View(r[9], int(r[10])), previous)
                rec["ck"] = {
                    "turn": int(r[11]),
                    "label": r[12],
                    "trigger": r[13],
                    "abandoned": bool(r[14]),
                    "created_at": float(r[15]),
                    **lists,
                }
            checkpoints.append(rec)
        wrows = rsql.fetchall(
            conn,
            "SELECT w.id, w.checkpoint_id, w.task_id, w.codec, w.dict_id, w.raw_size, w.state "
            "FROM lg_writes w WHERE w.thread_ref = ? ORDER BY w.id",
            (ref,),
        )
        items: dict[int, list[int]] = {}
        # the folded writes first (older), in their order, numbered below every row id
        folded_rows = [(-n, *w[:2], *w[2]) for n, w in enumerate(folded_writes, 1)]
        wrows = folded_rows[::-1] + list(wrows)
        for n, w in enumerate(folded_writes, 1):
            items[-n] = [int(b) for b in w[3]]
        for wid, _pos, blob_id in rsql.fetchall(
            conn,
            "SELECT i.write_id, i.position, i.blob_id FROM lg_write_items i JOIN lg_writes w "
            "ON w.id = i.write_id WHERE w.thread_ref = ? ORDER BY i.write_id, i.position",
            (ref,),
        ):
            items.setdefault(int(wid), []).append(int(blob_id))
        digest_of = _digests(store, conn, [i for ids in items.values() for i in ids])
        for wid, cid_b, task_b, codec, dict_id, size, packed in wrows:
            cid = id_text(bytes(cid_b))
            doc = unpack_doc(
                (int(codec), dict_id, int(size), bytes(packed)),
                f"pending writes on LangGraph checkpoint {cid} of thread {thread_id!r}",
            )
            writes.append(
                {
                    "type": "lg_write",
                    "ns": ns,
                    "checkpoint_id": cid,
                    "task_id": id_text(bytes(task_b)),
                    "doc": doc,
                    "items": [blob(digest_of[i]) for i in items.get(int(wid), [])],
                }
            )
    return threads + checkpoints + writes


def _digests(store: Store, conn: Any, ids: list[int]) -> dict[int, bytes]:
    unique = list(dict.fromkeys(ids))
    return dict(zip(unique, store.digests_for_ids(conn, unique), strict=True))


# ---------------------------------------------------------------------- checking a file
class ThreadLines:
    """The checks of a file's thread lines a reader makes beyond their schemas: each line's
    namespace announced first, each blob it names in the file (of a kind it may be), each
    root-namespace checkpoint's seq among the file's checkpoints, ids unique.
    """

    def __init__(self) -> None:
        self.thread_id: str | None = None
        self.own: str | None = None
        """The session's own namespace (its checkpoints are the file's, named by seq)."""
        self.spaces: set[str] = set()
        self.ids: set[tuple[str, str]] = set()

    def check(
        self,
        rec: dict[str, Any],
        need: Callable[[str, str], None],
        seqs: set[int],
        fail: Callable[[str], CheckpointFileError],
    ) -> None:
        """``need(digest, what)`` raises when the file lacks the blob; ``fail(reason)`` makes
        the error for this line.
        """
        kind = rec["type"]
        if kind == "lg_thread":
            if self.thread_id is None:
                if rec["ns"] != "" and rec["created_at"] is not None:
                    raise fail("the first lg_thread line must be the session's own namespace")
                self.thread_id, self.own = rec["thread_id"], rec["ns"]
            elif rec["thread_id"] != self.thread_id or rec["created_at"] is None:
                raise fail("an lg_thread line of another thread, or a second root")
            if rec["ns"] in self.spaces:
                raise fail(f"namespace {rec['ns']!r} comes twice")
            self.spaces.add(rec["ns"])
            return
        if rec["ns"] not in self.spaces:
            raise fail(f"namespace {rec['ns']!r} has no lg_thread line before it")
        what = f"LangGraph {kind[3:]} {rec['checkpoint_id'][:40]}"
        if kind == "lg_checkpoint":
            key = (rec["ns"], rec["checkpoint_id"])
            if key in self.ids:
                raise fail(f"checkpoint {rec['checkpoint_id'][:40]} comes twice")
            self.ids.add(key)
            if (rec["seq"] is None) != (rec["ns"] != self.own) or (rec["ck"] is None) != (
                rec["ns"] == self.own
            ):
                raise fail(f"{what}: the session's own namespace gives seq, a subgraph's ck (only)")
            if rec["seq"] is not None and rec["seq"] not in seqs:
                raise fail(f"{what}: seq {rec['seq']} is not a checkpoint of the file")
            for ch, ref in rec["state"].get("v", {}).items():
                if isinstance(ref, list) and ref[:1] == ["b"]:
                    if len(ref) != 3 or not isinstance(ref[2], str):
                        raise fail(f"{what}: channel {str(ch)[:40]}: a blob ref without a digest")
                    need(ref[2], what)
            for d in (rec["ck"] or {}).get("add", []):
                need(d, what)
        else:
            for d in rec["items"]:
                need(d, what)


# ---------------------------------------------------------------------- import
class ThreadWriter:
    """Writes a file's thread lines into the importing transaction (``travel_import``)."""

    def __init__(
        self,
        store: Store,
        conn: Connection,
        session_id: int,
        seq_ids: dict[int, int],
        blob_id: Callable[[str], int],
    ) -> None:
        self.store = store
        self.conn = conn
        self.sid = session_id
        self.seq_ids = seq_ids
        self.blob_id = blob_id
        self.thread_id = ""
        self.refs: dict[str, int] = {}
        self.spaces: dict[str, list[Any]] = {}
        """A subgraph namespace's ``[session id, view, seq, turn, cover hex]`` while written."""

    def thread(self, rec: dict[str, Any]) -> None:
        """Map a namespace of the thread (a subgraph's: to a new child session)."""
        thread_id, ns = rec["thread_id"], rec["ns"]
        taken = rsql.fetchone(
            self.conn,
            "SELECT id FROM lg_threads WHERE thread_id = ? AND checkpoint_ns = ?",
            (thread_id, ns),
        )
        if taken is not None:
            where = f" (namespace {ns!r})" if ns else ""
            raise UsageError(
                f"LangGraph thread {thread_id!r}{where} already exists in this archive",
                hint="import it on another run root, or delete the thread here first "
                "(AlpstoreSaver.delete_thread)",
            )
        self.thread_id = thread_id
        sid = self.sid
        if rec["created_at"] is not None:  # a subgraph namespace: a child of the thread
            sid = self._namespace_session(thread_id, ns, float(rec["created_at"]))
            self.spaces[ns] = [sid, EMPTY, 0, 0, None]
        (self.refs[ns],) = rsql.fetchone(
            self.conn,
            "INSERT INTO lg_threads (thread_id, checkpoint_ns, session_id) VALUES (?, ?, ?) "
            "RETURNING id",
            (thread_id, ns, sid),
        )

    def _namespace_session(self, thread_id: str, ns: str, created: float) -> int:
        st = self.store
        session = st.create_session(
            name=st.available_name(self.conn, session_name(thread_id, ns)),
            origin={"langgraph": {"thread_id": thread_id, "checkpoint_ns": ns}},
        )
        root = rsql.fetchone(self.conn, "SELECT root_id FROM sessions WHERE id = ?", (self.sid,))
        first = rsql.fetchone(
            self.conn,
            "SELECT id FROM checkpoints WHERE session_id = ? AND created_at <= ? "
            "ORDER BY seq DESC LIMIT 1",
            (self.sid, created),
        )
        rsql.execute(
            self.conn,
            "UPDATE sessions SET parent_id = ?, root_id = ?, source_checkpoint_id = ?, "
            "created_at = ?, status = 'active' WHERE id = ?",
            (
                self.sid,
                root[0] or self.sid,
                None if first is None else first[0],
                created,
                session.id,
            ),
        )
        return session.id

    def checkpoint(self, rec: dict[str, Any]) -> None:
        """One LangGraph checkpoint row (a subgraph namespace's with its alpstore checkpoint)."""
        ns = rec["ns"]
        if rec["seq"] is not None:
            alp_id = self.seq_ids[rec["seq"]]
        else:
            alp_id = self._ns_checkpoint(ns, rec["ck"])
        run = rec["run"]
        if run is not None:
            rsql.execute(
                self.conn,
                "INSERT INTO lg_runs (run_id) VALUES (?) ON CONFLICT (run_id) DO NOTHING",
                (run,),
            )
        state = _map_state(rec["state"], self.blob_id)
        (new,) = rsql.fetchone(
            self.conn,
            "INSERT INTO lg_checkpoints (thread_ref, checkpoint_id, parent_checkpoint_id, "
            "alp_checkpoint_id, run_ref, codec, dict_id, raw_size, state) VALUES (?, ?, ?, ?, "
            "(SELECT id FROM lg_runs WHERE run_id = ?), ?, ?, ?, ?) RETURNING id",
            (
                self.refs[ns],
                id_bytes(rec["checkpoint_id"]),
                None if rec["parent"] is None else id_bytes(rec["parent"]),
                alp_id,
                run,
                *pack_doc(state),
            ),
        )
        rsql.executemany(
            self.conn,
            "INSERT INTO lg_checkpoint_blobs (checkpoint_ref, blob_id) VALUES (?, ?)",
            [(new, b) for b in dict.fromkeys(_state_blob_ids(state))],
        )

    def _ns_checkpoint(self, ns: str, ck: dict[str, Any]) -> int:
        space = self.spaces[ns]
        sid, view = space[0], space[1]
        views = self.store.views
        base = views.cut(self.conn, view, ck["keep"]) if ck["keep"] else EMPTY
        add = [self.blob_id(d) for d in ck["add"]]
        view = views.append(self.conn, base, sid, add) if add else base
        seq = space[2] + 1
        (ck_id,) = rsql.fetchone(
            self.conn,
            _INSERT_CHECKPOINT,
            (
                sid,
                seq,
                ck["turn"],
                view.segment_id,
                view.length,
                None,
                None,
                ck["label"],
                ck["trigger"],
                ck["abandoned"],
                ck["created_at"],
                bytes.fromhex(ck["covering"]),
            ),
        )
        self.spaces[ns] = [sid, view, seq, ck["turn"], ck["covering"]]
        return int(ck_id)

    def write(self, rec: dict[str, Any]) -> None:
        """One task's pending writes."""
        (wid,) = rsql.fetchone(
            self.conn,
            "INSERT INTO lg_writes (thread_ref, checkpoint_id, task_id, codec, dict_id, "
            "raw_size, state) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (
                self.refs[rec["ns"]],
                id_bytes(rec["checkpoint_id"]),
                id_bytes(rec["task_id"]),
                *pack_doc(rec["doc"]),
            ),
        )
        rsql.executemany(
            self.conn,
            "INSERT INTO lg_write_items (write_id, position, blob_id) VALUES (?, ?, ?)",
            [(wid, i, self.blob_id(d)) for i, d in enumerate(rec["items"])],
        )

    def finish(self) -> None:
        """Each namespace session's head: its newest checkpoint's list."""
        for sid, view, _, turn, cover in self.spaces.values():
            rsql.execute(
                self.conn,
                "UPDATE sessions SET head_segment_id = ?, head_length = ?, head_digest = ?, "
                "turn = ? WHERE id = ?",
                (
                    view.segment_id,
                    view.length,
                    bytes.fromhex(cover) if cover else EMPTY_COVER,
                    turn,
                    sid,
                ),
            )
