"""Deep export and import: a shallow checkpoint hydrated into a self-contained version 2 file,
and such a file loaded into any archive (another machine), re-deriving every digest.

Layout (documented in ``docs/formats.md``): the covering list becomes the first agent's
``working_memory[0].committed_messages``. Each message object is stored as it was, plus the
reserved key ``_alpstore: {"digest": hex}``; a summary becomes ``{"role": "system", "content":
text, "_alpstore": {"kind": "summary", "digest": hex, "covers": [hex, …]}}``; a value that is not
an object (or already uses the reserved key) is wrapped as ``{"_alpstore": {"digest", "value"}}``.
Every entry a summary covers (transitively, children before parents) is carried in
``conversation_chunks.alpstore.covered`` in the same encoding, so a rewind across a compaction
still works where the file is imported.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from alpstore.archive.base import summary_document
from alpstore.codec import Digest, canonical_json, digest_bytes, digest_hex
from alpstore.errors import CanonicalJSONError, CheckpointFileError, IntegrityError, UsageError
from alpstore.portable.files import (
    build_v2,
    check_for_secrets,
    empty_kernel,
    iso_from_timestamp,
    validate_document,
)
from alpstore.sessions import CheckpointInfo, Entry, Session, SessionInfo, default_label
from alpstore.views import cover_of

if TYPE_CHECKING:
    from alpstore.store import Store
    from alpstore.views import View

RESERVED: Final = "_alpstore"
"""The key alpstore adds to message objects in a deep file (digest, summary marker)."""
BLOCK: Final = "alpstore"
"""The key of alpstore's block inside ``conversation_chunks`` of the first agent."""
FORMAT: Final = 1
DEFAULT_AGENT_ID: Final = "agent"
IMPORT_TRIGGER: Final = "import"


@dataclass(frozen=True)
class Snapshot:
    """What a deep export hydrates: a session's view with its state at one point.

    Fields:
        session: the session row.
        view: the covering list to hydrate.
        turn, label: the checkpoint's turn and effective label.
        kernel, working_memory: the state documents stored with it (or None).
        checkpoint: the checkpoint row, or None when exporting the live head.
    """

    session: SessionInfo
    view: View
    turn: int
    label: str
    kernel: Any | None
    working_memory: Any | None
    checkpoint: CheckpointInfo | None


def snapshot_of_checkpoint(store: Store, checkpoint: CheckpointInfo) -> Snapshot:
    """The snapshot a checkpoint row points at."""
    session = store.get_session(checkpoint.session)
    kernel, wm = store.checkpoint_state(checkpoint)
    return Snapshot(
        session.info(),
        checkpoint.view,
        checkpoint.turn,
        checkpoint.label,
        kernel,
        wm,
        checkpoint,
    )


def snapshot_of_head(store: Store, session: Session) -> Snapshot:
    """The live head, with the state of the session's latest retained checkpoint (if any)."""
    info = session.info()
    cks = session.checkpoints()
    kernel = wm = None
    if cks:
        kernel, wm = store.checkpoint_state(cks[-1])
    return Snapshot(info, info.head, info.turn, default_label(info.turn), kernel, wm, None)


# ---------------------------------------------------------------------- encoding
def encode_entry(entry: Entry) -> dict[str, Any]:
    """One covering-list entry as a message object of the file."""
    hexd = digest_hex(entry.digest)
    if entry.kind == "summary":
        value = entry.value
        return {
            "role": "system",
            "content": value["summary"],
            RESERVED: {"kind": "summary", "digest": hexd, "covers": list(value["covers"])},
        }
    if isinstance(entry.value, dict) and RESERVED not in entry.value:
        out = dict(entry.value)
        out[RESERVED] = {"digest": hexd}
        return out
    return {RESERVED: {"digest": hexd, "value": entry.value}}


@dataclass(frozen=True)
class Item:
    """A decoded entry of a deep file: kind, value as stored, digest re-derived."""

    kind: str
    value: Any
    digest: Digest
    covers: tuple[Digest, ...] = ()

    @property
    def text(self) -> str:
        """A summary's text."""
        return str(self.value["summary"])


def _hex_digest(text: Any, where: str) -> Digest:
    if not isinstance(text, str) or len(text) != 64:
        raise CheckpointFileError(f"{where}: expected a 64-character hex digest")
    try:
        return Digest(bytes.fromhex(text))
    except ValueError:
        raise CheckpointFileError(f"{where}: expected a 64-character hex digest") from None


def decode_item(obj: Any, where: str, *, require_digest: bool = False) -> Item:
    """Decode a message object of a file, re-deriving its digest and checking a carried one.

    ``require_digest``: the file is an alpstore export, which carries a digest in every message,
    so a message without one was changed after export (a flipped byte in the marker's key).

    Raises:
        CheckpointFileError: a malformed marker, or a carried digest that is missing or does not
            match.
    """
    if not isinstance(obj, dict):
        raise CheckpointFileError(f"{where}: expected a message object")
    marker = obj.get(RESERVED)
    kind = "message"
    covers: tuple[Digest, ...] = ()
    if marker is None:
        value: Any = obj
    else:
        if not isinstance(marker, dict):
            raise CheckpointFileError(f"{where}.{RESERVED}: expected an object")
        kind = marker.get("kind", "message")
        if kind == "summary":
            text = obj.get("content")
            if not isinstance(text, str):
                raise CheckpointFileError(f"{where}.content: a summary's text must be a string")
            raw = marker.get("covers")
            if not isinstance(raw, list):
                raise CheckpointFileError(f"{where}.{RESERVED}.covers: expected a list")
            covers = tuple(
                _hex_digest(h, f"{where}.{RESERVED}.covers[{i}]") for i, h in enumerate(raw)
            )
            value = summary_document(text, covers)
        elif kind == "message":
            value = (
                marker["value"]
                if "value" in marker
                else {k: v for k, v in obj.items() if k != RESERVED}
            )
        else:
            raise CheckpointFileError(f"{where}.{RESERVED}.kind: unknown kind {kind!r}")
    try:
        digest = digest_bytes(canonical_json(value))
    except CanonicalJSONError as exc:
        raise CheckpointFileError(f"{where}: {exc.message}") from exc
    if require_digest and (marker is None or "digest" not in marker):
        raise CheckpointFileError(
            f"{where}: carries no {RESERVED}.digest, yet this alpstore export has one in every "
            "message",
            hint="the message was edited after export",
        )
    if marker is not None and "digest" in marker:
        carried = _hex_digest(marker["digest"], f"{where}.{RESERVED}.digest")
        if carried != digest:
            raise CheckpointFileError(
                f"{where}: carried digest {digest_hex(carried)[:12]}… does not match the "
                f"content (re-derived {digest_hex(digest)[:12]}…)",
                hint="the message was edited after export",
            )
    return Item(kind, value, digest, covers)


# ---------------------------------------------------------------------- export
def _covered(store: Store, entries: Sequence[Entry]) -> list[Entry]:
    """Every entry the summaries of ``entries`` cover, transitively, children first."""
    out: list[Entry] = []
    done: set[bytes] = set()

    def visit(summary: Entry) -> None:
        for child in store.expand(summary):
            if child.digest in done:
                continue
            _require_intact(child.value, child.digest, f"blob {child.hex}")
            done.add(child.digest)
            if child.kind == "summary":
                visit(child)
            out.append(child)

    for entry in entries:
        if entry.kind == "summary":
            visit(entry)
    return out


def _require_intact(value: Any, digest: bytes, what: str) -> None:
    """Refuse to export a document whose stored bytes no longer match their digest.

    Raises:
        IntegrityError: the archive's copy is damaged (``archive verify`` names it).
    """
    if digest_bytes(canonical_json(value)) != digest:
        raise IntegrityError(
            f"{what}: stored content does not match its digest {digest_hex(digest)}; not exported",
            hint="`alpstore archive verify` names the damage",
        )


def _is_entries(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, dict) and isinstance(v.get("agent_id"), str) for v in value)
    )


def _lineage(store: Store, info: SessionInfo) -> dict[str, Any]:
    origin = info.origin or {}
    imported = origin.get("lineage") if isinstance(origin.get("lineage"), dict) else None
    if info.parent is not None:
        forked: str | None = None
        if info.source_checkpoint is not None:
            try:
                src = store.get_checkpoint(int(info.source_checkpoint))
                forked = f"{info.parent}-{src.label}.json"
            except Exception:  # the source row was pruned: still name it by id
                forked = f"{info.parent}@{info.source_checkpoint}"
        return {"parent": info.parent, "forked": forked, "root": info.root, "created": None}
    if imported is not None:
        return {
            "parent": imported.get("parent_session_id"),
            "forked": imported.get("forked_from_checkpoint"),
            "root": imported.get("root_session_id"),
            "created": imported.get("created_at"),
        }
    return {"parent": None, "forked": None, "root": info.root, "created": None}


def build_export(store: Store, snap: Snapshot) -> dict[str, Any]:
    """Hydrate a snapshot into a version 2 document (validated, not yet secret-scanned).

    Raises:
        CheckpointFileError: the stored state cannot be expressed in the upstream schema.
    """
    info = snap.session
    entries = store.hydrate_view(snap.view, verify=True)  # never export damaged content
    if snap.checkpoint is not None:
        for value, digest in (
            (snap.kernel, snap.checkpoint.kernel_digest),
            (snap.working_memory, snap.checkpoint.wm_digest),
        ):
            if value is not None and digest is not None:
                _require_intact(value, digest, f"checkpoint {snap.checkpoint.id} state")
    committed = [encode_entry(e) for e in entries]
    covered = [encode_entry(e) for e in _covered(store, entries)]
    manifest = store.session_manifest(info.id)
    block: dict[str, Any] = {"format": FORMAT, "archive_view_id": snap.view.archive_view_id}
    block["covering_digest"] = _covering_digest(snap, entries)
    if covered:
        block["covered"] = covered
    if manifest is None:
        manifest = {
            "apiVersion": "mas/v1",
            "kind": "Agent",
            "metadata": {"name": info.name or info.uuid},
            "spec": {},
        }
        block["manifest_absent"] = True
    if not isinstance(manifest, dict):
        raise CheckpointFileError(f"session {info.uuid}: its manifest is not a JSON object")
    wm = snap.working_memory
    agent_id = str((manifest.get("metadata") or {}).get("name") or DEFAULT_AGENT_ID)
    agents: list[dict[str, Any]]
    if _is_entries(wm):
        agents = copy.deepcopy(list(wm or []))
        first = agents[0]
        block["working_memory_shape"] = "entries"
        chunks = first.get("conversation_chunks")
        block["chunks_absent"] = chunks is None
        first["conversation_chunks"] = {**(chunks or {}), BLOCK: block}
        first["committed_messages"] = committed
        first.setdefault("turn_history", [])
    else:
        if wm is not None:
            block["working_memory_shape"] = "value"
            block["working_memory"] = wm
        else:
            block["working_memory_shape"] = "none"
        agents = [
            {
                "agent_id": agent_id,
                "turn_history": [],
                "committed_messages": committed,
                "conversation_chunks": {BLOCK: block},
            }
        ]
    kernel = snap.kernel
    if kernel is None:
        block["kernel_absent"] = True
        kernel = empty_kernel()
    elif not isinstance(kernel, dict):
        raise CheckpointFileError(f"session {info.uuid}: the kernel snapshot is not an object")
    else:
        kernel = {"q": {}, "run": {}, **kernel}
    if snap.checkpoint is not None:
        block["checkpoint"] = {"id": snap.checkpoint.id, "trigger": snap.checkpoint.trigger}
    lin = _lineage(store, info)
    origin = info.origin or {}
    backtracks = info.backtrack_count + int(origin.get("backtrack_count") or 0)
    doc = build_v2(
        session_id=info.uuid,
        label=snap.label,
        turn=snap.turn,
        kernel=kernel,
        working_memory=agents,
        manifest=manifest,
        parent_session_id=lin["parent"],
        forked_from_checkpoint=lin["forked"],
        root_session_id=lin["root"],
        created_at=lin["created"] or iso_from_timestamp(info.created_at),
        backtrack_count=backtracks,
    )
    return validate_document(doc, where=f"export of session {info.uuid}")


def export_snapshot(store: Store, snap: Snapshot, *, scan: bool = True) -> dict[str, Any]:
    """:func:`build_export` plus the CK-11 secret scan (nothing is returned when it fails).

    ``scan=False`` leaves the scan to the writer (``write_checkpoint_file`` always scans).

    Raises:
        SecretError: an inline secret in kernel, working memory or manifest.
        CheckpointFileError: see :func:`build_export`.
    """
    doc = build_export(store, snap)
    if scan:
        check_for_secrets(doc, what=f"checkpoint of session {snap.session.uuid}")
    return doc


# ---------------------------------------------------------------------- import
@dataclass(frozen=True)
class ImportPlan:
    """A validated deep file, decoded; nothing written yet.

    Fields:
        version: 1 or 2.
        session_id: ``lineage.session_id`` (None for version 1).
        conversation: the covering list, in order.
        covered: covered entries, children before parents.
        kernel, working_memory: the state to store with the checkpoint.
        manifest: the embedded manifest, or None when it was synthesised at export.
        lineage: the file's lineage block (version 2).
        label, turn, backtrack_count: from the file.
    """

    version: int
    session_id: str | None
    conversation: tuple[Item, ...]
    covered: tuple[Item, ...]
    kernel: Any | None
    working_memory: Any | None
    manifest: dict[str, Any] | None
    lineage: dict[str, Any] | None
    label: str | None
    turn: int
    backtrack_count: int


def plan_import(doc: dict[str, Any], *, where: str) -> ImportPlan:
    """Validate and decode a checkpoint document (schema, manifest hash, every digest).

    Raises:
        CheckpointFileError: anything wrong, naming the JSON path.
    """
    validate_document(doc, where=where)
    turn = int(doc.get("turn", 0))
    label = doc.get("label")
    if doc["version"] == 1:
        return ImportPlan(1, None, (), (), doc["kernel"], None, None, None, label, turn, 0)
    agents = [dict(a) for a in doc["working_memory"]]  # the entries we edit are copied
    block: dict[str, Any] = {}
    conversation: list[Item] = []
    covered: list[Item] = []
    wm: Any | None = agents if agents else None
    if agents:
        first = agents[0]
        chunks = first.get("conversation_chunks")
        if isinstance(chunks, dict) and isinstance(chunks.get(BLOCK), dict):
            chunks = dict(chunks)
            block = chunks.pop(BLOCK)
            first["conversation_chunks"] = chunks
            if block.get("chunks_absent"):
                first["conversation_chunks"] = None
        path = "$.working_memory[0].committed_messages"
        conversation = [
            decode_item(m, f"{path}[{i}]", require_digest=bool(block))
            for i, m in enumerate(first["committed_messages"])
        ]
        cpath = f"$.working_memory[0].conversation_chunks.{BLOCK}.covered"
        raw_covered = block.get("covered", [])
        if not isinstance(raw_covered, list):
            raise CheckpointFileError(f"{where}: {cpath}: expected a list")
        covered = [
            decode_item(m, f"{cpath}[{i}]", require_digest=bool(block))
            for i, m in enumerate(raw_covered)
        ]
        first["committed_messages"] = []
        shape = block.get("working_memory_shape")
        if shape == "value":
            wm = block.get("working_memory")
        elif shape == "none":
            wm = None
    _check_covers(conversation, covered, where)
    _check_covering_digest(block, conversation, where)
    kernel: Any | None = None if block.get("kernel_absent") else doc["kernel"]
    manifest = None if block.get("manifest_absent") else doc["manifest"]["content"]
    return ImportPlan(
        2,
        doc["lineage"]["session_id"],
        tuple(conversation),
        tuple(covered),
        kernel,
        wm,
        manifest,
        doc["lineage"],
        label,
        turn,
        int(doc.get("backtrack_count", 0)),
    )


def _covering_digest(snap: Snapshot, entries: Sequence[Entry]) -> str:
    """The covering digest a deep file carries; a checkpoint's must match the one it recorded.

    Raises:
        IntegrityError: the checkpoint's list no longer matches its digest (not exported).
    """
    cover = cover_of([e.digest for e in entries])
    recorded = snap.checkpoint.covering_digest if snap.checkpoint is not None else None
    if snap.checkpoint is not None and recorded is not None and recorded != cover:
        raise IntegrityError(
            f"checkpoint {snap.checkpoint.id}: its covering list does not match its recorded "
            "digest (an entry was swapped, lost or reordered); not exported",
            hint="`alpstore archive verify` names every checkpoint affected",
        )
    return cover.hex()


def _check_covering_digest(block: dict[str, Any], conversation: Sequence[Item], where: str) -> None:
    """A carried covering digest must be the one the committed messages re-derive (files
    without one — older exports, mas-lab's — carry none and are not checked).
    """
    if "covering_digest" not in block:
        return
    path = f"$.working_memory[0].conversation_chunks.{BLOCK}.covering_digest"
    carried = _hex_digest(block["covering_digest"], f"{where}: {path}")
    derived = cover_of([i.digest for i in conversation])
    if carried != derived:
        raise CheckpointFileError(
            f"{where}: {path} {digest_hex(carried)[:12]}… does not match the committed messages "
            f"(re-derived {digest_hex(derived)[:12]}…): an entry was swapped, lost or reordered"
        )


def _check_covers(conversation: Sequence[Item], covered: Sequence[Item], where: str) -> None:
    """Every summary's covered digests must be carried earlier in the covered list."""
    known: set[bytes] = set()
    for item in covered:
        for d in item.covers:
            if d not in known:
                raise CheckpointFileError(
                    f"{where}: a covered summary refers to {digest_hex(d)[:12]}…, which the "
                    "file does not carry before it"
                )
        known.add(item.digest)
    for i, item in enumerate(conversation):
        missing = [d for d in item.covers if d not in known]
        if missing:
            raise CheckpointFileError(
                f"{where}: $.working_memory[0].committed_messages[{i}] summarises "
                f"{digest_hex(missing[0])[:12]}…, which the file does not carry",
                hint="deep files carry every entry a summary covers",
            )


@dataclass(frozen=True)
class ImportResult:
    """What an import did.

    Fields:
        session: the session (new, or the existing one when the history was already there).
        checkpoint: the checkpoint that now holds the file's state.
        entries: entries in the covering list.
        covered: entries carried for summaries.
        new_blobs: blobs the archive did not hold before (deduplication at work).
        existing: True when the archive already held this session at this point.
    """

    session: Session
    checkpoint: CheckpointInfo
    entries: int
    covered: int
    new_blobs: int
    existing: bool


def _find_existing(store: Store, session_id: str) -> Session | None:
    try:
        found = store.get_session(session_id)
    except Exception:  # NotFoundError or an ambiguous prefix: no exact match
        return None
    return found if found.uuid == session_id else None


def _matching_checkpoint(store: Store, session: Session, plan: ImportPlan) -> CheckpointInfo | None:
    want = [i.digest for i in plan.conversation]
    for ck in reversed(session.checkpoints(include_abandoned=True)):
        if ck.length == len(want) and [e.digest for e in store.hydrate(ck)] == want:
            return ck
    return None


def _count_new(store: Store, plan: ImportPlan) -> int:
    digests = list(dict.fromkeys(i.digest for i in (*plan.covered, *plan.conversation)))
    with store.db.read() as conn:
        found = store.archive.ids_for(conn, digests)
    return len(digests) - len(found)


def import_plan(
    store: Store,
    plan: ImportPlan,
    *,
    source_name: str,
    fork: bool = False,
    session_id: str | None = None,
    manifest: dict[str, Any] | None = None,
) -> ImportResult:
    """Load a planned file into the archive.

    Keeps the file's session id unless ``fork`` (then ``session_id`` or a new one, with the
    file's session as parent). When the archive already holds the session with this exact
    history at some checkpoint, that checkpoint is returned instead (``existing``).
    Version 1 needs ``manifest`` (kernel-only snapshot, LC-6).

    Raises:
        UsageError: version 1 without a manifest, a taken session id, or a session that exists
            with another history.
    """
    if plan.version == 1 and manifest is None:
        raise UsageError(
            f"{source_name}: a version 1 checkpoint holds only a kernel; pass --manifest",
        )
    if session_id is not None and not fork:
        raise UsageError("--session-id applies to a fork; an import keeps the file's session id")
    if plan.version == 2 and not fork:
        assert plan.session_id is not None
        existing = _find_existing(store, plan.session_id)
        if existing is not None:
            ck = _matching_checkpoint(store, existing, plan)
            if ck is None:
                raise UsageError(
                    f"session {plan.session_id} already exists in this archive with a different "
                    "history",
                    hint="use --fork to load the file as a new session",
                )
            return ImportResult(existing, ck, len(plan.conversation), len(plan.covered), 0, True)
    new_blobs = _count_new(store, plan)
    origin: dict[str, Any] = {"source": "checkpoint-file", "file": source_name}
    if plan.lineage is not None:
        lineage = dict(plan.lineage)
        if fork:
            lineage = {
                "parent_session_id": plan.session_id,
                "forked_from_checkpoint": source_name,
                "root_session_id": plan.lineage.get("root_session_id") or plan.session_id,
                "created_at": None,
            }
        origin["lineage"] = lineage
    if plan.backtrack_count and not fork:
        origin["backtrack_count"] = plan.backtrack_count
    with store.db.atomic():  # all or nothing: a failure leaves no partial session
        uuid = plan.session_id if not fork and plan.version == 2 else session_id
        session = store.create_session(
            session_id=uuid,
            manifest=manifest if manifest is not None else plan.manifest,
            origin=origin,
        )
        messages = [i.value for i in plan.covered if i.kind == "message"]
        if messages:
            store.archive.put_many(messages)
        for item in plan.covered:
            if item.kind == "summary":
                store.archive.put_summary(item.text, item.covers)
        batch: list[Any] = []
        for item in plan.conversation:
            if item.kind == "message":
                batch.append(item.value)
                continue
            if batch:
                session.append(batch)
                batch = []
            session.append_summary(item.text, item.covers)
        if batch:
            session.append(batch)
        ck = session.checkpoint(
            kernel=plan.kernel,
            working_memory=plan.working_memory,
            label=plan.label or default_label(plan.turn),
            trigger=IMPORT_TRIGGER,
            turn=plan.turn,
        )
    store.archive.after_commit()
    return ImportResult(session, ck, len(plan.conversation), len(plan.covered), new_blobs, False)


def import_document(
    store: Store,
    doc: dict[str, Any],
    *,
    source_name: str,
    fork: bool = False,
    session_id: str | None = None,
    manifest: dict[str, Any] | None = None,
) -> ImportResult:
    """:func:`plan_import` then :func:`import_plan` (validation happens before any write)."""
    plan = plan_import(doc, where=source_name)
    return import_plan(
        store, plan, source_name=source_name, fork=fork, session_id=session_id, manifest=manifest
    )
