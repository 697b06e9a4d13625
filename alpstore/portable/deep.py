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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from alpstore.archive.base import summary_document
from alpstore.codec import Digest, canonical_json, digest_bytes, digest_hex
from alpstore.errors import CanonicalJSONError, CheckpointFileError, IntegrityError
from alpstore.portable.files import (
    build_v2,
    canonical_bytes,
    check_depth,
    check_for_secrets,
    empty_kernel,
    iso_from_timestamp,
    validate_document,
)
from alpstore.rules.ids import check_session_id, check_text, shown, text_problem
from alpstore.sessions import CheckpointInfo, Entry, Session, SessionInfo, default_label
from alpstore.views import cover_of

if TYPE_CHECKING:
    from alpstore.core.store import CoreStore as Store
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
    label = default_label(info.turn)
    if cks:
        kernel, wm = store.checkpoint_state(cks[-1])
        if cks[-1].view == info.head and cks[-1].turn == info.turn:
            label = cks[-1].label  # the head is that checkpoint: keep its label
    return Snapshot(info, info.head, info.turn, label, kernel, wm, None)


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


class Item(NamedTuple):
    """A decoded entry of a deep file: kind, value as stored, digest re-derived.

    ``raw`` is the canonical JSON the digest was computed from (what the archive stores). A
    named tuple: one is made per message of an import.
    """

    kind: str
    value: Any
    digest: Digest
    covers: tuple[Digest, ...] = ()
    raw: bytes = b""
    carried: bool = False
    """True when the message object carried an ``_alpstore.digest`` (checked equal)."""

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


_MARKER_KEYS: Final = frozenset({"digest", "kind", "value", "covers"})
_SUMMARY_KEYS: Final = frozenset({"role", "content", RESERVED})


def _marker(obj: dict[str, Any], where: str) -> tuple[str, dict[str, Any]]:
    """The checked ``_alpstore`` marker of a message object: ``(kind, marker)``.

    A marker that carries the value (``value``) or makes the object a summary must stand
    alone: beside other keys, a person (or another tool) would read those keys while the
    import took the marker's content.

    Raises:
        CheckpointFileError: the marker is malformed or sits beside keys it would hide.
    """
    marker = obj[RESERVED]
    if not isinstance(marker, dict):
        raise CheckpointFileError(f"{where}.{RESERVED}: expected an object")
    unknown = sorted(k for k in marker if k not in _MARKER_KEYS)
    if unknown:
        raise CheckpointFileError(
            f"{where}.{RESERVED}: unknown key {shown(unknown[0])}; refused",
            hint="the marker carries only digest, kind, value and covers",
        )
    kind = marker.get("kind", "message")
    if kind == "summary":
        extra = sorted(k for k in obj if k not in _SUMMARY_KEYS)
        if extra or obj.get("role") != "system" or "value" in marker:
            raise CheckpointFileError(
                f"{where}: a summary marker beside other content "
                f"({shown(extra[0]) if extra else 'role/value'}); refused",
                hint="what a person reads in the file must be what is imported",
            )
    elif kind == "message":
        if "covers" in marker:
            raise CheckpointFileError(f"{where}.{RESERVED}.covers: only a summary covers entries")
        if "value" in marker and len(obj) != 1:
            other = next(k for k in obj if k != RESERVED)
            raise CheckpointFileError(
                f"{where}: {RESERVED}.value beside the visible key {shown(other)}; refused",
                hint="what a person reads in the file must be what is imported",
            )
    else:
        raise CheckpointFileError(f"{where}.{RESERVED}.kind: unknown kind {shown(kind)}")
    return str(kind), marker


def _without_marker(obj: dict[str, Any]) -> dict[str, Any]:
    """A message object without its ``_alpstore`` key: a plain dict (a copy made in C, then
    one delete; the caller's object is left as it was).
    """
    value = dict(obj)
    del value[RESERVED]
    return value


def decode_item(
    obj: Any, where: str, *, require_digest: bool = False, parsed: bool = False
) -> Item:
    """Decode a message object of a file, re-deriving its digest and checking a carried one.

    ``require_digest``: the file is an alpstore export, which carries a digest in every message,
    so a message without one was changed after export (a flipped byte in the marker's key).
    ``parsed``: ``obj`` came from ``json`` (every key a string), so canonical JSON skips that
    check.

    Raises:
        CheckpointFileError: a malformed marker, a marker beside keys it would hide, content
            nested deeper than the limit, or a carried digest that is missing or does not match.
    """
    if not isinstance(obj, dict):
        raise CheckpointFileError(f"{where}: expected a message object")
    kind = "message"
    covers: tuple[Digest, ...] = ()
    marker: dict[str, Any] | None = None
    if RESERVED not in obj:
        value: Any = obj
    elif type(marker := obj[RESERVED]) is dict and len(marker) == 1 and "digest" in marker:
        value = _without_marker(obj)  # an export's plain message
    else:
        kind, marker = _marker(obj, where)
        if kind == "summary":
            text = obj.get("content")
            if not isinstance(text, str):
                raise CheckpointFileError(f"{where}.content: a summary's text must be a string")
            raw = marker.get("covers")
            if not isinstance(raw, list) or not raw:
                raise CheckpointFileError(
                    f"{where}.{RESERVED}.covers: expected a non-empty list of digests"
                )
            covers = tuple(
                _hex_digest(h, f"{where}.{RESERVED}.covers[{i}]") for i, h in enumerate(raw)
            )
            value = summary_document(text, covers)
        elif "value" in marker:
            value = marker["value"]
        else:
            value = _without_marker(obj)
    try:
        canonical = canonical_bytes(value, where, parsed=parsed)
    except CanonicalJSONError as exc:
        raise CheckpointFileError(f"{where}: {exc.message}") from exc
    digest = digest_bytes(canonical)
    carried = marker is not None and "digest" in marker
    if require_digest and not carried:
        raise CheckpointFileError(
            f"{where}: carries no {RESERVED}.digest, yet this alpstore export has one in every "
            "message",
            hint="the message was edited after export",
        )
    if marker is not None and carried and marker["digest"] != digest.hex():  # else: equal
        found = _hex_digest(marker["digest"], f"{where}.{RESERVED}.digest")
        if found != digest:
            raise CheckpointFileError(
                f"{where}: carried digest {digest_hex(found)[:12]}… does not match the "
                f"content (re-derived {digest_hex(digest)[:12]}…)",
                hint="the message was edited after export",
            )
    return Item(kind, value, digest, covers, canonical, carried)


# ---------------------------------------------------------------------- export
def _covered(store: Store, entries: Sequence[Entry]) -> Iterator[Entry]:
    """Every entry the summaries of ``entries`` cover, transitively, children first (one
    summary's children in memory at a time).
    """
    done: set[bytes] = set()
    for entry in entries:
        if entry.kind != "summary":
            continue
        # an explicit stack, not recursion: a chain of folds nests summaries as deep as it is
        # long (10,000 rolling folds are 10,000 levels)
        stack: list[tuple[Iterator[Entry], Entry | None]] = [(iter(store.expand(entry)), None)]
        while stack:
            children, owner = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                if owner is not None:
                    yield owner  # after everything it covers
                continue
            if child.digest in done:
                continue
            _require_intact(child.value, child.digest, f"blob {child.hex}")
            done.add(child.digest)
            if child.kind == "summary":
                stack.append((iter(store.expand(child)), child))
            else:
                yield child


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


def export_kernel(kernel: Any | None) -> Any | None:
    """The kernel as a file carries it (the schema requires ``q`` and ``run``)."""
    if isinstance(kernel, dict):
        return {"q": {}, "run": {}, **kernel}
    return kernel


def comparable_wm(wm: Any | None) -> Any | None:
    """Working memory as an export then import gives it back (the first agent's messages are
    the covering list, kept apart): for comparing a file's state with a checkpoint's.
    """
    if not _is_entries(wm):
        return wm
    agents = list(wm or [])
    first = dict(agents[0])
    first["committed_messages"] = []
    first.setdefault("turn_history", [])
    return [first, *agents[1:]]


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


def inherited_fields(store: Store, info: SessionInfo) -> dict[str, Any]:
    """The mas-lab fields (``spec_revision``, ``memory_seeds``, ``runtime_profile``) a session
    keeps from the file it was imported from, itself or through the sessions it forked from.
    """
    for _ in range(10_000):
        origin = info.origin or {}
        fields = origin.get("fields")
        if isinstance(fields, dict):
            return fields
        if origin or info.parent is None:
            return {}
        info = store.get_session(info.parent).info(refresh=False)
    return {}


def check_exportable(info: SessionInfo, label: str) -> None:
    """Refuse, before anything is written, an id or label an import would refuse.

    Raises:
        CheckpointFileError: naming the field and the rule.
    """
    what = f"session {shown(info.uuid)}"
    check_session_id(info.uuid, f"export of {what}: its id")
    check_text(label, f"export of {what}: the label")


def build_header(
    store: Store, snap: Snapshot, *, covered: bool
) -> tuple[dict[str, Any], list[Any], list[Any] | None]:
    """The version 2 document without its messages: ``(doc, committed, covered)`` where the
    two lists are the (empty) places in ``doc`` the covering list and the covered entries go.

    Raises:
        CheckpointFileError: the stored state cannot be expressed in the upstream schema, or an
            import would refuse the session's id, name or label.
    """
    info = snap.session
    check_exportable(info, snap.label)
    if snap.checkpoint is not None:
        for value, digest in (
            (snap.kernel, snap.checkpoint.kernel_digest),
            (snap.working_memory, snap.checkpoint.wm_digest),
        ):
            if value is not None and digest is not None:
                _require_intact(value, digest, f"checkpoint {snap.checkpoint.id} state")
    committed: list[Any] = []
    covered_list: list[Any] | None = [] if covered else None
    manifest = store.session_manifest(info.id)
    block: dict[str, Any] = {"format": FORMAT, "archive_view_id": snap.view.archive_view_id}
    block["covering_digest"] = _covering_digest(store, snap)
    if info.name is not None and text_problem(info.name) is None:
        block["name"] = info.name  # a name an import would refuse stays here
    if covered_list is not None:
        block["covered"] = covered_list
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
        kernel = export_kernel(kernel)
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
    fields = inherited_fields(store, info)
    if fields:
        doc.update({k: fields[k] for k in ("spec_revision", "memory_seeds", "runtime_profile")
                    if k in fields})  # fmt: skip
    for key in ("kernel", "manifest", "working_memory", "memory_seeds", "runtime_profile"):
        if key in doc:
            check_depth(doc[key], f"export of session {info.uuid}: $.{key}")
    return doc, committed, covered_list


def build_export(store: Store, snap: Snapshot) -> dict[str, Any]:
    """Hydrate a snapshot into a version 2 document in memory (validated, not yet
    secret-scanned). :func:`alpstore.portable.exporting.write_export` streams instead.

    Raises:
        CheckpointFileError: the stored state cannot be expressed in the upstream schema.
    """
    entries = store.hydrate_view(snap.view, verify=True)  # never export damaged content
    covered = [encode_entry(e) for e in _covered(store, entries)]
    doc, committed, covered_list = build_header(store, snap, covered=bool(covered))
    for i, e in enumerate(entries):
        check_depth(e.value, f"export of session {snap.session.uuid}: entry {i}")
    committed.extend(encode_entry(e) for e in entries)
    if covered_list is not None:
        covered_list.extend(covered)
    return validate_document(doc, where=f"export of session {snap.session.uuid}")


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


def _covering_digest(store: Store, snap: Snapshot) -> str:
    """The covering digest a deep file carries, re-derived from the view's entries; a
    checkpoint's must match the one it recorded.

    Raises:
        IntegrityError: the checkpoint's list no longer matches its digest (not exported).
    """
    with store.db.read() as conn:
        cover = cover_of(store.views.read_digests(conn, snap.view))
    recorded = snap.checkpoint.covering_digest if snap.checkpoint is not None else None
    if snap.checkpoint is not None and recorded is not None and recorded != cover:
        raise IntegrityError(
            f"checkpoint {snap.checkpoint.id}: its covering list does not match its recorded "
            "digest (an entry was swapped, lost or reordered); not exported",
            hint="`alpstore archive verify` names every checkpoint affected",
        )
    return cover.hex()


def check_covering_digest(doc: dict[str, Any], derived: bytes, where: str) -> None:
    """A carried covering digest must be ``derived``, the one the committed messages re-derive
    (:func:`~alpstore.views.cover_of`); files without one — older exports, mas-lab's — carry
    none and are not checked.

    Raises:
        CheckpointFileError: the digest is malformed or does not match.
    """
    try:
        block = doc["working_memory"][0]["conversation_chunks"][BLOCK]
    except (KeyError, IndexError, TypeError):
        return
    if not isinstance(block, dict) or "covering_digest" not in block:
        return
    path = f"$.working_memory[0].conversation_chunks.{BLOCK}.covering_digest"
    carried = _hex_digest(block["covering_digest"], f"{where}: {path}")
    if carried != derived:
        raise CheckpointFileError(
            f"{where}: {path} {digest_hex(carried)[:12]}… does not match the committed messages "
            f"(re-derived {digest_hex(derived)[:12]}…): an entry was swapped, lost or reordered"
        )
