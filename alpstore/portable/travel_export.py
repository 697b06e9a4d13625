"""Write a session file (``alpstore.session``, see ``travel``): every blob once, then the
session, its checkpoints as keep + add deltas, the head, backtracks, events and the end line.
"""

from __future__ import annotations

import json
from binascii import hexlify
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alpstore import fileio
from alpstore.codec import MAX_DEPTH, brackets, digest_hex, nesting_depth
from alpstore.db import raw as rsql
from alpstore.db.names import BLOB_SUMMARY
from alpstore.errors import CheckpointFileError, NotFoundError
from alpstore.portable.files import MAX_DOCUMENT_BYTES, is_compressed
from alpstore.portable.targets import refuse_database_target
from alpstore.portable.travel_format import (
    FORMAT,
    KIND_NAMES,
    VERSION,
    Digester,
    ListState,
    portable_dir,
    with_dir,
)
from alpstore.rules.secrets import Finding, may_hold_secrets_canonical, scan, secret_error
from alpstore.views import READ_RANGE_ID_DIGESTS, View, clip, common_prefix, fetch_range

if TYPE_CHECKING:
    from alpstore.core.store import CoreStore as Store


@dataclass(frozen=True)
class SessionExport:
    """What an export wrote (or, with no file, what the digest covered)."""

    session: str
    digest: str
    checkpoints: int
    blobs: int
    lines: int


_BLOB_LINE = b'{"type":"blob","digest":"%s","kind":"%s","value":%s}\n'
"""A blob line: its digest (hex), kind and canonical value, as the file spells it."""

_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""``json.dumps(rec, ensure_ascii=False, separators=(",", ":"))`` made once (``dumps`` with
arguments makes an encoder per call)."""


def _line(rec: dict[str, Any]) -> bytes:
    return _ENCODER.encode(rec).encode("utf-8") + b"\n"


def _ref(ref_id: Any, seqs: dict[int, int]) -> dict[str, int] | None:
    if ref_id is None:
        return None
    ref: dict[str, int] = {"id": int(ref_id)}
    if int(ref_id) in seqs:
        ref["seq"] = seqs[int(ref_id)]
    return ref


class _Collect:
    """The blob digests the records need, in order of first need, with the blob's id where the
    read that found the digest gave it (the others are looked up by digest).
    """

    def __init__(self) -> None:
        self.order: dict[bytes, int | None] = {}

    def add(self, digest: bytes | None, blob_id: int | None = None) -> str | None:
        if digest is None:
            return None
        key = bytes(digest)
        if self.order.get(key) is None:
            self.order[key] = blob_id
        return digest_hex(digest)


def session_records(
    store: Store,
    conn: Any,
    session_id: int,
    blobs: _Collect,
    states: dict[int, ListState] | None = None,
) -> list[dict[str, Any]]:
    """Every non-blob line of the session's file (blob digests noted in ``blobs``); ``states``
    is given each checkpoint and head line's list state by its index in the list (what
    :meth:`Digester.feed` would apply again).
    """
    srow = rsql.fetchone(
        conn,
        "SELECT uuid, name, parent_id, source_checkpoint_id, origin, manifest_blob_id, status, "
        "head_segment_id, head_length, turn, backtrack_count, retention_mode, retention_n, "
        "created_at, updated_at FROM sessions WHERE id = ?",
        (session_id,),
    )
    if srow is None:
        raise NotFoundError(f"session {session_id} is gone")
    cks = rsql.fetchall(
        conn,
        "SELECT id, seq, turn, segment_id, length, kernel_blob_id, wm_blob_id, label, trigger, "
        "abandoned, created_at FROM checkpoints WHERE session_id = ? ORDER BY seq",
        (session_id,),
    )
    bts = rsql.fetchall(
        conn,
        "SELECT id, from_checkpoint_id, to_checkpoint_id, steps, steering_blob_id, automatic, "
        "error_signature, created_at FROM backtracks WHERE session_id = ? ORDER BY id",
        (session_id,),
    )
    evs = rsql.fetchall(
        conn,
        "SELECT kind, checkpoint_id, detail, created_at FROM session_events "
        "WHERE session_id = ? ORDER BY id",
        (session_id,),
    )
    state_ids = [r[5] for r in cks] + [r[6] for r in cks] + [r[4] for r in bts] + [srow[5]]
    known = [int(i) for i in dict.fromkeys(state_ids) if i is not None]
    digest_of = dict(zip(known, store.digests_for_ids(conn, known), strict=True))

    def blob(blob_id: Any) -> str | None:
        if blob_id is None:
            return None
        return blobs.add(digest_of[int(blob_id)], int(blob_id))

    parent = None
    if srow[2] is not None and srow[3] is not None:
        anchor = rsql.fetchone(
            conn,
            "SELECT s.uuid, c.seq, c.covering_digest FROM checkpoints c JOIN sessions s "
            "ON s.id = c.session_id WHERE c.id = ? AND s.id = ?",
            (srow[3], srow[2]),
        )
        if anchor is not None:
            cover = digest_hex(bytes(anchor[2])) if anchor[2] is not None else None
            parent = {"session": anchor[0], "seq": int(anchor[1]), "covering": cover}
    recs: list[dict[str, Any]] = [
        {
            "type": "session",
            "uuid": srow[0],
            "name": srow[1],
            "status": srow[6],
            "turn": int(srow[9]),
            "backtrack_count": int(srow[10]),
            "retention": {"mode": srow[11], "n": int(srow[12])},
            "origin": _portable_origin(srow[4], store.root),
            "manifest": blob(srow[5]),
            "created_at": float(srow[13]),
            "updated_at": float(srow[14]),
            "parent": parent,
        }
    ]
    seqs = {int(r[0]): int(r[1]) for r in cks}
    previous: list[tuple[int, int, int]] = []
    lists = Digester()
    head_view = View(srow[7], int(srow[8]))
    entries = _Entries(store, conn, [View(r[3], int(r[4])) for r in cks], head_view)
    for r in cks:
        view = View(r[3], int(r[4]))
        rec, previous = _delta(store, conn, view, previous, lists, blobs, commit=True, at=entries)
        if states is not None:
            states[len(recs)] = rec.pop("state")
        else:
            del rec["state"]
        recs.append(
            {
                "type": "checkpoint",
                "id": int(r[0]),
                "seq": int(r[1]),
                "turn": int(r[2]),
                "label": r[7],
                "trigger": r[8],
                "abandoned": bool(r[9]),
                "created_at": float(r[10]),
                "kernel": blob(r[5]),
                "wm": blob(r[6]),
                **rec,
            }
        )
    head, _ = _delta(store, conn, head_view, previous, lists, blobs, commit=False, at=entries)
    state = head.pop("state")
    if states is not None:
        states[len(recs)] = state
    recs.append({"type": "head", **head})
    for bt_id, src, dst, steps, steering, automatic, signature, at in bts:
        recs.append(
            {
                "type": "backtrack",
                "id": int(bt_id),
                "from": _ref(src, seqs),
                "to": _ref(dst, seqs),
                "steps": int(steps),
                "steering": blob(steering),
                "automatic": bool(automatic),
                "error_signature": signature,
                "created_at": float(at),
            }
        )
    for kind, ck_id, detail, at in evs:
        recs.append(
            {
                "type": "event",
                "kind": kind,
                "checkpoint": _ref(ck_id, seqs),
                "detail": detail,
                "created_at": float(at),
            }
        )
    recs.extend(_thread_records(store, conn, session_id, seqs, blobs))
    return recs


def _thread_records(
    store: Store, conn: Any, session_id: int, seqs: dict[int, int], blobs: _Collect
) -> list[dict[str, Any]]:
    """The lines of the LangGraph thread the session holds, if any (``travel_lg``)."""
    from alpstore.portable.travel_lg import Delta, thread_records

    def note(digest: bytes) -> str:
        return blobs.add(digest) or ""

    def delta() -> Delta:
        lists = Digester()

        def of(view: View, previous: list[tuple[int, int, int]]) -> tuple[dict[str, Any], Any]:
            rec, chain = _delta(store, conn, view, previous, lists, blobs, commit=True)
            del rec["state"]
            return rec, chain

        return of

    return thread_records(store, conn, session_id, seqs, note, delta)


def _portable_origin(text: str | None, root: Path) -> str | None:
    """The session's ``origin`` as the file carries it: the recorded policy's checkpoint
    directory relative to the run root (None when it lay outside it: it does not travel).
    """
    if not text:
        return text
    origin = json.loads(text)
    folder = portable_dir(origin)
    if folder is None:
        return text
    try:
        rel: str | None = Path(folder).relative_to(root).as_posix()
    except ValueError:
        rel = None
    if rel == ".":
        rel = None
    return json.dumps(with_dir(origin, rel), sort_keys=True)


class _Entries:
    """The entries a session's checkpoints and head add, each segment's span read in one range
    scan (a 1,000-checkpoint session made 1,000 small reads, one per checkpoint); a segment's
    rows are dropped after the last view that needs them. What the spans do not cover whole (a
    missing entry) is read view by view, which names the damage.
    """

    def __init__(self, store: Store, conn: Any, checkpoints: Sequence[View], head: View) -> None:
        self.store, self.conn = store, conn
        self.spans: dict[int, tuple[int, int]] = {}
        """Segment id -> the positions ``[lo, hi)`` the views read from it."""
        self.last: dict[int, int] = {}
        """Segment id -> the index of the last view that reads it."""
        self.rows: dict[int, tuple[int, list[Any]]] = {}
        """Segment id -> (first position, ``(digest, blob id)`` rows) read."""
        self.served = 0
        self.plan: list[tuple[list[tuple[int, int, int]], int]] = []
        """Each view's chain and how many entries it keeps of the previous checkpoint's."""
        previous: list[tuple[int, int, int]] = []
        for i, view in enumerate([*checkpoints, head]):
            chain = store.views.chain(conn, view) if view.length else []
            keep = common_prefix(previous, chain)
            self.plan.append((chain, keep))
            for seg, lo, hi in clip(chain, keep):
                a, b = self.spans.get(seg, (lo, hi))
                self.spans[seg] = (min(a, lo), max(b, hi))
                self.last[seg] = i
            if i < len(checkpoints):
                previous = chain

    def read(self, view: View, chain: list[tuple[int, int, int]], keep: int) -> list[Any]:
        """``(digest, blob id)`` of ``view``'s entries from ``keep`` on, for the views in the
        order given (each asked once).
        """
        index, self.served = self.served, self.served + 1
        out: list[Any] = []
        for seg, lo, hi in clip(chain, keep):
            got = self.rows.get(seg)
            if got is None and seg in self.spans:
                a, b = self.spans.pop(seg)
                rows = fetch_range(self.conn, READ_RANGE_ID_DIGESTS, seg, a, b)
                if len(rows) == b - a:
                    self.rows[seg] = got = (a, rows)
            if got is None or not got[0] <= lo <= hi <= got[0] + len(got[1]):
                return self.store.views.read_digest_ids(self.conn, view, keep)  # names it
            out.extend(got[1][lo - got[0] : hi - got[0]])
            if self.last.get(seg) == index:
                del self.rows[seg]
        return out


def _delta(
    store: Store,
    conn: Any,
    view: View,
    previous: list[tuple[int, int, int]],
    lists: Digester,
    blobs: _Collect,
    *,
    commit: bool,
    at: _Entries | None = None,
) -> tuple[dict[str, Any], list[tuple[int, int, int]]]:
    """``view`` as keep + add over the previous checkpoint's view (its chain and entries): keep
    is the prefix the two share in the piece table, as `session log` counts what a checkpoint
    adds, so the importing archive shares (and counts) the same prefix. The record's
    ``state`` is the list's (:class:`ListState`), for the session digest: not a line's field.
    """
    if at is not None:  # (asked for every view, in order; the chain and keep it planned)
        chain, keep = at.plan[at.served]
        rows: list[Any] = at.read(view, chain, keep)
    else:
        chain = store.views.chain(conn, view) if view.length else []
        keep = common_prefix(previous, chain)
        rows = store.views.read_digest_ids(conn, view, keep) if view.length > keep else []
    added = list(map(bytes, map(itemgetter(0), rows)))
    add = list(map(bytes.hex, added))
    # noted in order of first need: a digest already noted keeps its place (and gets its id)
    blobs.order.update(zip(added, map(int, map(itemgetter(1), rows)), strict=True))
    state = lists.apply(keep, add, commit=commit, added=added)
    return {"keep": keep, "add": add, "covering": state.covering, "state": state}, chain


@dataclass
class _Level:
    """One list of digests being written (the head's, or a summary's covers)."""

    todo: list[bytes]
    after: tuple[bytes, bytes, int, bytes] | None = None
    """The summary whose covers these are: written when they are."""
    pos: int = 0
    ids: dict[bytes, int] = field(default_factory=dict)
    rows: Mapping[int, tuple[bytes, int, bytes]] = field(default_factory=dict)
    clean: bool = False
    """The prefilter found nothing in ``rows`` (none needs a check of its own)."""


def _blob_lines(
    store: Store,
    conn: Any,
    digests: Sequence[bytes],
    done: set[bytes],
    checks: _Scan,
    known: Mapping[bytes, int | None] | None = None,
) -> Iterator[list[bytes]]:
    """The blob lines of ``digests`` not yet written, each summary's covered blobs first, a
    batch of lines at a time; ``known``: blob ids already read with their digests (the others
    are looked up).

    An explicit stack of levels, not recursion: a chain of folds nests summaries as deep as it
    is long (10,000 rolling folds are 10,000 levels). Each level loads 256 rows at a time and
    writes them in one loop, until a summary (its covers first) or the batch's end.
    """
    kinds = {k: name.encode() for k, name in KIND_NAMES.items()}

    def line(d: bytes, digest: bytes, kind: int, raw: bytes, clean: bool) -> bytes:
        # the depth bound's C-speed count inline (``_Scan.blob`` when it may be passed)
        if not clean or raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
            checks.blob(raw, f"blob {digest_hex(digest)}", clean=clean)
        done.add(d)
        return _BLOB_LINE % (hexlify(digest), kinds[kind], raw)

    stack = [_Level([d for d in dict.fromkeys(digests) if d not in done])]
    while stack:
        level = stack[-1]
        if level.pos >= len(level.todo):
            stack.pop()
            if level.after is not None and level.after[0] not in done:
                yield [line(*level.after, clean=False)]
            continue
        if level.pos % 256 == 0:
            part = level.todo[level.pos : level.pos + 256]
            ids = {d: i for d in part if (i := known.get(d)) is not None} if known else {}
            if len(ids) < len(part):
                ids.update(store.archive.ids_for(conn, [d for d in part if d not in ids]))
            level.ids = ids
            missing = [d for d in part if d not in level.ids]
            if missing:
                raise NotFoundError(f"blob {digest_hex(missing[0])} is missing from the archive")
            level.rows = store.archive.load_raw_by_ids(conn, [level.ids[d] for d in part])
            # one prefilter over the batch (issue 41): canonical JSON holds no raw newline, so a
            # finding in any blob is found in the joined text; clean, none needs its own check
            joined = b"\n".join(raw for _, _, raw in level.rows.values())
            level.clean = not may_hold_secrets_canonical(joined)
        todo, rows, ids, clean = level.todo, level.rows, level.ids, level.clean
        end = min(len(todo), level.pos - level.pos % 256 + 256)
        out: list[bytes] = []
        i = level.pos
        while i < end:
            d = todo[i]
            i += 1
            if d in done:
                continue
            digest, kind, raw = rows[ids[d]]
            if kind == BLOB_SUMMARY:
                covers = [bytes.fromhex(c) for c in json.loads(raw)["covers"]]
                below = [c for c in dict.fromkeys(covers) if c not in done]
                stack.append(_Level(below, (d, digest, kind, raw)))
                break
            # the depth bound's C-speed count inline (``_Scan.blob`` when it may be passed)
            if not clean or raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
                checks.blob(raw, f"blob {digest_hex(digest)}", clean=clean)
            done.add(d)
            out.append(_BLOB_LINE % (hexlify(digest), kinds[kind], raw))
        level.pos = i
        if out:
            yield out


class _Scan:
    """Depth and secret checks of what an export writes (as an import will check them)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.findings: list[Finding] = []

    def blob(self, raw: bytes, path: str, *, clean: bool = False) -> None:
        """Check one blob; ``clean``: its batch's prefilter found no possible secret."""
        if brackets(raw) > MAX_DEPTH and nesting_depth(json.loads(raw)) > MAX_DEPTH:
            raise CheckpointFileError(
                f"{self.what}: {path} is nested deeper than {MAX_DEPTH} levels; not exported"
            )
        if not clean and may_hold_secrets_canonical(raw):
            self.findings.extend(scan(json.loads(raw), path))

    def text(self, value: str | None, path: str) -> None:
        if value:
            self.findings.extend(scan(json.loads(value), path))


def export_session(
    store: Store, session_id: int, path: Path | None, *, overwrite: bool = False
) -> SessionExport:
    """Write the session file to ``path`` (``.zst``: one zstd stream), or with ``path`` None
    only compute the session digest.

    The file appears (temp → fsync → rename) only when every check passed: nothing deeper
    than an import reads, no inline secret (CK-11).

    Raises:
        NotFoundError, CheckpointFileError, SecretError, StorageError.
    """
    from alpstore.portable.exporting import atomic_stream

    blobs = _Collect()
    digester = Digester()
    states: dict[int, ListState] = {}
    with store.db.read() as conn:
        recs = session_records(store, conn, session_id, blobs, states)
        for i, rec in enumerate(recs):
            digester.feed(rec, states.get(i))
        digest = digester.hexdigest()
        n_cks = sum(1 for r in recs if r["type"] == "checkpoint")
        if path is None:
            return SessionExport(recs[0]["uuid"], digest, n_cks, len(blobs.order), 0)
        checks = _Scan(str(path))
        checks.text(recs[0]["origin"], "$.session.origin")
        for rec in recs:
            if rec["type"] == "event":
                checks.text(rec["detail"], f"$.event[{rec['kind']}].detail")
            elif rec["type"] in ("lg_checkpoint", "lg_write"):  # a thread's inline values
                body = rec["state"] if rec["type"] == "lg_checkpoint" else rec["doc"]
                checks.findings.extend(scan(body, f"$.{rec['type']}[{rec['checkpoint_id']}]"))
        refuse_database_target(path, archive=getattr(store.db, "path", None))
        fileio.refuse_symlink(path)
        lines = 0
        written = 0
        with atomic_stream(path, compress=is_compressed(path), overwrite=overwrite) as write:

            def put(data: bytes) -> None:
                nonlocal lines, written
                lines += 1
                written += len(data)
                if written > MAX_DOCUMENT_BYTES:
                    raise CheckpointFileError(
                        f"{path}: the file would be larger than {MAX_DOCUMENT_BYTES} bytes, the "
                        "limit an import reads; not exported"
                    )
                write(data)

            def put_all(batch: list[bytes], size: int) -> None:
                nonlocal lines, written
                if written + size > MAX_DOCUMENT_BYTES:
                    for data in batch:  # names the limit as put does, nothing beyond it written
                        put(data)
                lines += len(batch)
                written += size
                write(b"".join(batch))

            put(_line({"format": FORMAT, "version": VERSION}))
            done: set[bytes] = set()
            batch: list[bytes] = []
            size = 0
            for part in _blob_lines(store, conn, list(blobs.order), done, checks, blobs.order):
                batch += part  # written ~1 MiB at a time, counted as put counts each
                size += sum(map(len, part))
                if size >= 1 << 20:
                    put_all(batch, size)
                    batch, size = [], 0
            put_all(batch, size)
            if checks.findings:
                raise secret_error(checks.findings, what=str(path))
            for rec in recs:
                put(_line(rec))
            put(_line({"type": "end", "lines": lines + 1, "digest": digest}))
    return SessionExport(recs[0]["uuid"], digest, n_cks, len(done), lines)
