"""Write a deep checkpoint file, streaming, under the limits an import checks.

Small sessions (up to :data:`~alpstore.portable.files.PRETTY_MAX_MESSAGES` entries and
:data:`SMALL_EXPORT_BYTES`) are built in memory and pretty-printed like mas-lab's files. Larger
ones stream: the header (everything but the messages) is built, secret-scanned and validated
first; then the covering list is read in batches and each message is written as its stored
canonical JSON with the ``_alpstore`` marker spliced in (no parse, no re-serialisation), and
scanned and depth-checked on the way. The file appears (temp → fsync → rename) only when every
check passed, so what export writes, import reads.

Paths an imported manifest names (``storage.path``) are confined to the run root: a file from
another machine does not decide where this one writes (:func:`storage_dir`).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import uuid as uuidlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

import zstandard

from alpstore.codec import MAX_DEPTH, Digest, brackets, digest_hex, nesting_depth
from alpstore.db.names import BLOB_SUMMARY
from alpstore.errors import CheckpointFileError, SecretError, StorageError
from alpstore.portable.deep import (
    BLOCK,
    RESERVED,
    Snapshot,
    _covered,
    build_export,
    build_header,
    encode_entry,
)
from alpstore.portable.files import (
    MAX_DOCUMENT_BYTES,
    PRETTY_MAX_MESSAGES,
    ZST_LEVEL,
    check_for_secrets,
    is_compressed,
    validate_document,
    write_checkpoint_file,
)
from alpstore.portable.targets import refuse_database_target
from alpstore.rules.secrets import Finding, may_hold_secrets_canonical, scan, secret_error
from alpstore.sessions import Entry, Session

if TYPE_CHECKING:
    from alpstore.core.store import CoreStore as Store

SMALL_EXPORT_BYTES: Final = 8 * 1024 * 1024
"""Sessions up to this many raw bytes (and 1,000 entries) are exported in memory, pretty."""

ROWS_PER_BATCH: Final = 256
BATCH_RAW_BYTES: Final = 8 * 1024 * 1024
"""Blobs decompressed at a time while streaming: at most this many, and this many raw bytes."""


# ---------------------------------------------------------------------- where to write
def manifest_from_file(store: Store, session: Session) -> bool:
    """True when the session's manifest came from an imported file (its own, or an ancestor's
    it was forked from), not from the user's command line.
    """
    info = session.info()
    for _ in range(10_000):
        origin = info.origin or {}
        if origin.get("source") == "checkpoint-file":
            return origin.get("manifest") != "argument"
        if info.parent is None:
            return False
        info = store.get_session(info.parent).info(refresh=False)
    return True


def storage_dir(store: Store, session: Session, storage_path: str, root: Path) -> Path:
    """The directory ``storage.path`` of a session's manifest names, confined to the run root
    when the manifest came from an imported file.

    Raises:
        CheckpointFileError: an imported manifest's path leads outside the run root.
    """
    path = Path(storage_path)
    if not manifest_from_file(store, session):
        return path.expanduser()
    base = root.resolve()
    target = (base / path).resolve()  # an absolute path stays absolute
    if target != base and base not in target.parents:
        raise CheckpointFileError(
            f"session {session.uuid}: storage.path {ascii(storage_path)[:80]} of its imported "
            f"manifest leads outside the run root {base}; refused",
            hint="pass --checkpoint-dir DIR to choose where checkpoint files go",
        )
    return target


# ---------------------------------------------------------------------- writing
@contextlib.contextmanager
def atomic_stream(
    path: Path, *, compress: bool, overwrite: bool
) -> Iterator[Callable[[bytes | memoryview], None]]:
    """A ``write`` function into a temporary file beside ``path``, renamed over it (after
    fsync) when the block ends without an exception, deleted otherwise.

    Raises:
        CheckpointFileError: ``path`` exists and ``overwrite`` is false.
        StorageError: the file system refused the write.
    """
    if not overwrite and path.exists():
        raise CheckpointFileError(f"{path}: already exists; refusing to overwrite")
    refuse_database_target(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise StorageError(f"{path.parent}: cannot write ({exc.strerror})") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            sink: IO[bytes] | Any = fh
            writer = None
            if compress:
                cctx = zstandard.ZstdCompressor(level=ZST_LEVEL)
                writer = cctx.stream_writer(fh, closefd=False)
                sink = writer

            def write(data: bytes | memoryview) -> None:
                sink.write(data)

            yield write
            if writer is not None:
                writer.close()  # type: ignore[no-untyped-call]  # ends the frame
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise StorageError(f"{path}: cannot write ({exc.strerror})") from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _entry_parts(digest: bytes, kind: int, raw: bytes) -> list[Any]:
    """One entry as the file spells it, from its stored canonical JSON, in pieces (the stored
    bytes are not copied).
    """
    hexd = digest_hex(digest).encode()
    if kind != BLOB_SUMMARY:
        if raw[:1] == b"{" and b'"' + RESERVED.encode() + b'"' not in raw:
            head = b'{"' + RESERVED.encode() + b'":{"digest":"' + hexd + b'"}'
            return [head + b"}"] if raw == b"{}" else [head + b",", memoryview(raw)[1:]]
        if raw[:1] != b"{":
            head = b'{"' + RESERVED.encode() + b'":{"digest":"' + hexd + b'","value":'
            return [head, raw, b"}}"]
    value = json.loads(raw)
    entry = Entry(Digest(digest), "summary" if kind == BLOB_SUMMARY else "message", value)
    return [json.dumps(encode_entry(entry), ensure_ascii=False).encode("utf-8")]


class _Checks:
    """What every streamed entry must pass: depth, secrets, the size of the whole file."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.findings: list[Finding] = []
        self.written = 0

    def entry(self, raw: bytes, path: str, suspect: bool = True) -> None:
        if brackets(raw) > MAX_DEPTH and nesting_depth(json.loads(raw)) > MAX_DEPTH:
            raise CheckpointFileError(
                f"{self.what}: {path} is nested deeper than {MAX_DEPTH} levels; not exported",
                hint="an import would refuse it: deep files carry content at most "
                f"{MAX_DEPTH} levels deep",
            )
        if suspect and may_hold(raw):
            self.findings.extend(scan(json.loads(raw), path))

    def count(self, n: int) -> None:
        self.written += n
        if self.written > MAX_DOCUMENT_BYTES:
            raise CheckpointFileError(
                f"{self.what}: the file would be larger than {MAX_DOCUMENT_BYTES} bytes, the "
                "limit an import reads; not exported"
            )


def may_hold(raw: bytes) -> bool:
    """The secret scan's quick filter on canonical JSON."""
    return may_hold_secrets_canonical(raw)


def _view_rows(store: Store, conn: Any, snap: Snapshot) -> list[Any]:
    if snap.view.length == 0:
        return []
    return store.views.read_blob_rows(conn, snap.view)


def write_export(
    store: Store,
    snap: Snapshot,
    path: Path,
    *,
    compress: bool | None = None,
    overwrite: bool = True,
) -> Path:
    """Export a snapshot to ``path`` (``.json`` or ``.json.zst``): secret-scanned, validated,
    within the limits an import checks, written atomically. Large sessions stream.

    Raises:
        SecretError, CheckpointFileError, StorageError, IntegrityError: nothing was written.
    """
    if compress is None:
        compress = is_compressed(path)
    refuse_database_target(path, archive=getattr(store.db, "path", None))
    what = f"export of session {snap.session.uuid}"
    with store.db.read() as conn:
        rows = _view_rows(store, conn, snap)
        raw_total = sum(int(r[3]) for r in rows)
        if len(rows) <= PRETTY_MAX_MESSAGES and raw_total <= SMALL_EXPORT_BYTES:
            doc = build_export(store, snap)
            return write_checkpoint_file(doc, path, compress=compress, overwrite=overwrite)
        has_summaries = any(int(r[2]) == BLOB_SUMMARY for r in rows)
        doc, _, _ = build_header(store, snap, covered=has_summaries)
        check_for_secrets(doc, what=str(path))
        validate_document(doc, where=what)
        first = doc["working_memory"][0]
        token = uuidlib.uuid4().hex
        marks = {f"committed-{token}": "committed", f"covered-{token}": "covered"}
        first["committed_messages"] = f"committed-{token}"
        if has_summaries:
            first["conversation_chunks"][BLOCK]["covered"] = f"covered-{token}"
        text = json.dumps(doc, ensure_ascii=False)
        checks = _Checks(what)
        summaries: list[Entry] = []
        with atomic_stream(path, compress=compress, overwrite=overwrite) as write:

            def put(data: bytes | memoryview) -> None:
                checks.count(len(data))
                write(data)

            rest = text
            while rest:
                cut = min(
                    ((rest.find(json.dumps(m)), m) for m in marks if json.dumps(m) in rest),
                    default=None,
                )
                if cut is None:
                    put(rest.encode("utf-8") + b"\n")
                    break
                at, mark = cut
                put(rest[:at].encode("utf-8") + b"[")
                if marks[mark] == "committed":
                    _stream_view(store, conn, rows, put, checks, summaries)
                else:
                    _stream_covered(store, summaries, put, checks)
                put(b"]")
                rest = rest[at + len(json.dumps(mark)) :]
        if checks.findings:
            with contextlib.suppress(OSError):
                path.unlink()
            raise _secret(checks.findings, path)
    return path


def _secret(findings: list[Finding], path: Path) -> SecretError:
    return secret_error(findings, what=str(path))


def _batches(rows: list[Any]) -> Iterator[list[Any]]:
    """Rows in batches of at most :data:`ROWS_PER_BATCH` rows and :data:`BATCH_RAW_BYTES` raw
    bytes (a large message comes alone).
    """
    batch: list[Any] = []
    size = 0
    for row in rows:
        if batch and (len(batch) >= ROWS_PER_BATCH or size + int(row[3]) > BATCH_RAW_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(row)
        size += int(row[3])
    if batch:
        yield batch


def _stream_view(
    store: Store,
    conn: Any,
    rows: list[Any],
    put: Callable[[bytes | memoryview], None],
    checks: _Checks,
    summaries: list[Entry],
) -> None:
    index = 0
    for batch in _batches(rows):
        raws = store.archive.decode_rows(conn, batch, verify=True)
        suspect = len(raws) == 1 or may_hold(b"\n".join(raws))  # one scan for a clean batch
        parts: list[Any] = []
        for row, raw in zip(batch, raws, strict=True):
            digest, kind = bytes(row[1]), int(row[2])
            checks.entry(raw, f"$.working_memory[0].committed_messages[{index}]", suspect)
            if kind == BLOB_SUMMARY:
                value = json.loads(raw)
                covers = tuple(Digest(bytes.fromhex(h)) for h in value.get("covers", []))
                summaries.append(Entry(Digest(digest), "summary", value, covers))
            if index:
                parts.append(b",")
            parts.extend(_entry_parts(digest, kind, raw))
            index += 1
        del raws
        if len(batch) == 1:  # possibly large: no joined copy
            for part in parts:
                put(part)
        else:
            put(b"".join(parts))


def _stream_covered(
    store: Store,
    summaries: list[Entry],
    put: Callable[[bytes | memoryview], None],
    checks: _Checks,
) -> None:
    path = f"$.working_memory[0].conversation_chunks.{BLOCK}.covered"
    for i, entry in enumerate(_covered(store, summaries)):
        raw = json.dumps(entry.value, ensure_ascii=False).encode("utf-8")
        checks.entry(raw, f"{path}[{i}]")
        data = json.dumps(encode_entry(entry), ensure_ascii=False).encode("utf-8")
        put((b"," if i else b"") + data)
