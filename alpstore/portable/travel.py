"""Reading a session file (``alpstore.session`` version 1, :mod:`alpstore.portable.travel_format`)
as an import must: bounded lines, the header, every line checked against its schema, the order,
blob digests, references, secrets and the end line's digest.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import blake3
import zstandard

from alpstore.codec import parse_json
from alpstore.db.names import BLOB_SUMMARY
from alpstore.errors import AlpstoreError, CanonicalJSONError, CheckpointFileError
from alpstore.portable.files import MAX_DOCUMENT_BYTES, canonical_bytes
from alpstore.portable.travel_format import (
    FORMAT,
    HEX,
    KIND_CODES,
    KIND_NAMES,
    LINE_LIMIT,
    LINE_SCHEMAS,
    ORDER,
    VERSION,
    Digester,
    ListState,
    blob_line,
    certainly_valid,
    is_steering,
    portable_dir,
    schema_errors,
    with_dir,
)
from alpstore.portable.travel_header import header_of as header_of
from alpstore.portable.travel_header import open_lines
from alpstore.portable.travel_lg import ThreadLines
from alpstore.rules.ids import session_id_problem, text_problem
from alpstore.rules.secrets import may_hold_secrets_canonical, scan, secret_error


# ---------------------------------------------------------------------- reading
def raw_lines(path: Path, *, limit: int = LINE_LIMIT) -> Iterator[tuple[int, bytes]]:
    """``(line number, line)`` of a (``.zst``) JSON Lines file, bounded: a line longer than
    ``limit``, more than :data:`MAX_DOCUMENT_BYTES` in all, or a last line without its newline
    (a cut file) is refused.

    Raises:
        NotFoundError, CheckpointFileError.
    """
    handle, read = open_lines(path)
    with handle:
        buf = b""
        total = 0
        n = 0
        try:
            while True:
                chunk = read(1 << 20)
                if not chunk:
                    break
                total += len(chunk)
                if total > MAX_DOCUMENT_BYTES:
                    raise CheckpointFileError(
                        f"{path}: larger than the {MAX_DOCUMENT_BYTES}-byte limit; refused"
                    )
                buf += chunk
                start = 0
                while True:
                    end = buf.find(b"\n", start)
                    if end < 0:
                        break
                    n += 1
                    yield n, buf[start:end]
                    start = end + 1
                buf = buf[start:]
                if len(buf) > limit:
                    raise CheckpointFileError(
                        f"{path}: line {n + 1} is longer than {limit} bytes; refused"
                    )
        except zstandard.ZstdError as exc:
            raise CheckpointFileError(f"{path}: not a valid zstd file ({exc})") from exc
        except OSError as exc:
            raise CheckpointFileError(f"{path}: cannot read ({exc.strerror})") from exc
        if buf.strip():
            raise CheckpointFileError(
                f"{path}: line {n + 1} ends without a newline: the file is cut short (truncated)"
            )


_MESSAGE: Final = KIND_CODES["message"]


@dataclass
class Checked:
    """What reading a session file found (see :class:`SessionReader`)."""

    digest: str = ""
    session: dict[str, Any] | None = None
    checkpoints: int = 0
    blobs: int = 0
    lines: int = 0
    checkpoint_ids: tuple[int, int] = (0, 0)
    """The lowest and highest checkpoint id the file names (its checkpoints' and the ones its
    references name by id only); ``(0, 0)``: none."""
    backtrack_ids: tuple[int, int] = (0, 0)
    """The lowest and highest backtrack id (``(0, 0)``: none)."""
    events: int = 0
    threads: list[tuple[str, str]] = field(default_factory=list)
    """The LangGraph thread namespaces the file carries (``(thread_id, ns)``)."""
    seals: list[tuple[int, bytes]] | None = None
    """The lines read, sealed: ``(number of a run's last line, BLAKE3 of the run's lines)``
    for runs of about :data:`SEAL_BYTES` (None until the whole file was read)."""


SEAL_BYTES: Final = 1 << 20
"""Lines sealed together on the checking read; the import's read holds one run at a time. Also
the most bytes of blobs whose secret scan waits for a batch."""
SCAN_BATCH: Final = 256
"""Blobs whose secret prefilter runs once, on their joined bytes (as the export's)."""


MAX_EVENTS_PER_CHECKPOINT: Final = 256
"""Events a session file may carry per checkpoint (plus one checkpoint's worth for the head): a
session records a few per turn (status, backtrack, fork, decisions); a flood of markers in a
tiny compressed file is refused before it reaches the timeline."""


def _widen(span: tuple[int, int], value: int) -> tuple[int, int]:
    return (value, value) if span == (0, 0) else (min(span[0], value), max(span[1], value))


class SessionReader:
    """Reads a session file line by line, checking each as an import must: the header's format
    and version, every line against its schema and the type order, duplicate keys (the strict
    parser), every blob's content against its digest (each blob once), every reference to a blob
    or checkpoint, covering digests, ids and labels, inline secrets, the end line's count and
    digest. ``records()`` yields ``(line type, record, canonical bytes of a blob or None)``.
    """

    def __init__(self, path: Path, *, sealed: Checked | None = None, seal: bool = True) -> None:
        """``sealed``: what an earlier read of this file (:func:`check_session_file`) found.
        The lines are then compared with its seals before they are used (a file changed since
        is refused, whatever the change) and the checks that only repeat what that read proved
        of these very bytes are skipped: the line schemas, blob digests, secret scan of blobs.
        ``seal`` False: the lines are not sealed as they pass (a read that is the only one: an
        SQLite import's).
        """
        self.path = path
        self.result = Checked()
        self._seals = sealed.seals if sealed is not None else None
        self._seal = seal
        self._digester = Digester()
        self._kinds: dict[str, int] = {}
        self._seqs: set[int] = set()
        self._last_seq = 0
        self._last_id = 0
        self._last_bt = 0
        self._length = 0
        self._stage = 0
        self._steering: set[str] = set()
        """Digests of the message blobs a backtrack may name as its steering."""
        self._listable: set[str] = set()
        """Digests of the message and summary blobs read: what a checkpoint's list may hold."""
        self._threads = ThreadLines()
        self._unscanned: list[tuple[int, str, bytes, Any]] = []
        """Blobs read whose secret scan waits for a batch (``_scan_blobs``)."""
        self._unscanned_bytes = 0

    def _fail(self, n: int, reason: str, hint: str | None = None) -> CheckpointFileError:
        return CheckpointFileError(f"{self.path}: line {n}: {reason}", hint=hint)

    def records(self) -> Iterator[tuple[str, dict[str, Any], bytes | None]]:
        """Every line, checked, in order; raises on the first that fails.

        Raises:
            NotFoundError, CheckpointFileError, SecretError, PolicyError.
        """
        schemas: dict[str, Any] = {}
        ended = False
        trusted = self._seals is not None
        lines = (
            self._sealed_lines(self._seals)
            if self._seals is not None
            else self._sealing()
            if self._seal
            else raw_lines(self.path)
        )
        try:
            for n, line in lines:
                if not self._stage and n > 1:  # still the blob lines: the export's spelling?
                    fast = blob_line(line)
                    if fast is not None:
                        rec, raw = fast
                        yield "blob", rec, self._blob(n, rec, raw)
                        continue
                if n == 1:
                    self._header(line.removeprefix(b"\xef\xbb\xbf"))
                    continue
                if ended:
                    if line.strip():
                        raise self._fail(n, "a line after the end line")
                    continue
                try:
                    rec = parse_json(line, where=f"{self.path}: line {n}")
                except CanonicalJSONError as exc:
                    raise CheckpointFileError(exc.message) from exc
                if not isinstance(rec, dict) or rec.get("type") not in LINE_SCHEMAS:
                    raise self._fail(n, 'not a session-file line (no known "type")')
                kind = rec["type"]
                if kind != "blob" and self._unscanned:
                    self._scan_blobs()
                errors = (
                    []
                    if kind == "blob" or trusted or certainly_valid(rec)
                    else schema_errors(schemas, kind, rec)
                )
                if kind == "blob":
                    self._blob_shape(n, rec)
                elif (
                    kind in ("checkpoint", "head") and not errors and not self._digests(rec["add"])
                ):
                    raise self._fail(n, f"{kind} line: $.add: every entry must be a blob digest")
                if errors:
                    where = "".join(
                        f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in errors[0].path
                    )
                    raise self._fail(n, f"{kind} line: ${where}: {errors[0].message[:120]}")
                stage = ORDER.index(kind)
                if stage < self._stage or (kind in ("session", "head") and stage == self._stage):
                    raise self._fail(n, f"a {kind} line out of order")
                if stage > ORDER.index("session") and self._stage < ORDER.index("session"):
                    raise self._fail(n, f"a {kind} line before the session line")
                if stage > ORDER.index("head") and self._stage < ORDER.index("head"):
                    raise self._fail(n, f"a {kind} line before the head line")
                self._stage = stage
                raw = getattr(self, f"_{kind}")(n, rec)
                if kind == "end":
                    if rec["lines"] != n:
                        raise self._fail(
                            n, f"the end line says {rec['lines']} lines, the file has {n}"
                        )
                    if rec["digest"] != self.result.digest:
                        raise self._fail(
                            n,
                            f"session digest mismatch: the file says {rec['digest'][:16]}…, its "
                            f"content gives {self.result.digest[:16]}…",
                            hint="the file was changed after it was exported",
                        )
                    ended = True
                    self.result.lines = n
                yield kind, rec, raw
            self._scan_blobs()
        except AlpstoreError:
            self._scan_blobs()  # a blob read before holds a secret: that is the first finding
            raise
        if not ended:
            raise CheckpointFileError(
                f"{self.path}: no end line: the file is cut short (truncated)",
                hint="export the session again",
            )

    def _sealing(self) -> Iterator[tuple[int, bytes]]:
        """:func:`raw_lines`, sealing them as they pass: ``result.seals`` gets the BLAKE3
        digest of every :data:`SEAL_BYTES` or so of lines, with the number of the last.
        """
        seals: list[tuple[int, bytes]] = []
        hasher, size, n = blake3.blake3(), 0, 0
        for n, line in raw_lines(self.path):
            hasher.update(line)
            hasher.update(b"\n")
            size += len(line) + 1
            yield n, line
            if size >= SEAL_BYTES:
                seals.append((n, hasher.digest()))
                hasher, size = blake3.blake3(), 0
        if size:
            seals.append((n, hasher.digest()))
        self.result.seals = seals

    def _sealed_lines(self, seals: list[tuple[int, bytes]]) -> Iterator[tuple[int, bytes]]:
        """:func:`raw_lines`, each sealed run of lines held until it matches its seal (memory:
        one run, about :data:`SEAL_BYTES` and a line).

        Raises:
            CheckpointFileError: the file is not the one that was checked.
        """
        changed = CheckpointFileError(
            f"{self.path}: changed since it was checked; nothing imported",
            hint="import it again once nothing writes to it",
        )
        held: list[tuple[int, bytes]] = []
        hasher, at = blake3.blake3(), 0
        for n, line in raw_lines(self.path):
            if at == len(seals):
                raise changed
            hasher.update(line)
            hasher.update(b"\n")
            held.append((n, line))
            if n == seals[at][0]:
                if hasher.digest() != seals[at][1]:
                    raise changed
                yield from held
                held, hasher, at = [], blake3.blake3(), at + 1
        if at != len(seals):
            raise changed

    def _header(self, line: bytes) -> None:
        try:
            doc = parse_json(line, where=f"{self.path}: line 1")
        except CanonicalJSONError as exc:
            raise CheckpointFileError(exc.message) from exc
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise CheckpointFileError(f"{self.path}: not an {FORMAT} file (line 1)")
        if doc.get("version") != VERSION or set(doc) != {"format", "version"}:
            raise CheckpointFileError(
                f"{self.path}: {FORMAT} version {str(doc.get('version'))[:20]} is not known "
                f"(this alpstore reads version {VERSION})",
                hint="upgrade alpstore to import it",
            )

    def _need(self, n: int, digest: str | None, what: str, kinds: tuple[int, ...]) -> None:
        if digest is None:
            return
        kind = self._kinds.get(digest)
        if kind is None:
            raise self._fail(n, f"{what} names blob {digest[:16]}…, which the file does not hold")
        if kind not in kinds:
            raise self._fail(n, f"{what} names blob {digest[:16]}…, a {KIND_NAMES[kind]}")

    def _digests(self, add: list[Any]) -> bool:
        """True when every entry of a checkpoint's ``add`` is a blob digest (64 lowercase hex
        digits): at once when all are digests of blobs read (each was checked as it was read),
        else one by one.
        """
        try:
            if self._kinds.keys() >= set(add):
                return True
        except TypeError:  # (unhashable: not a digest)
            return False
        return all(isinstance(d, str) and HEX.fullmatch(d) for d in add)

    def _blob_shape(self, n: int, rec: dict[str, Any]) -> None:
        """What the blob line's schema says, checked directly (the hot line: jsonschema
        would cost more than the rest of the import).
        """
        if set(rec) != {"type", "digest", "kind", "value"}:
            raise self._fail(n, "blob line: expected exactly type, digest, kind, value")
        if not isinstance(rec["digest"], str) or not HEX.fullmatch(rec["digest"]):
            raise self._fail(n, "blob line: $.digest: not a BLAKE3 digest (64 hex digits)")
        if rec["kind"] not in KIND_CODES:
            raise self._fail(n, f"blob line: $.kind: expected one of {', '.join(KIND_CODES)}")

    def _blob(self, n: int, rec: dict[str, Any], raw: bytes | None = None) -> bytes:
        """The checks of a blob line past its shape; ``raw``: its value's canonical bytes when
        the line was read by :func:`blob_line` (else found here).
        """
        digest = rec["digest"]
        if digest in self._kinds:
            raise self._fail(n, f"blob {digest[:16]}… comes twice")
        if raw is None:
            raw = canonical_bytes(rec["value"], f"{self.path}: line {n}: $.value", parsed=True)
        if self._seals is not None:  # these bytes were checked: digest, shape, secrets
            self._held(digest, KIND_CODES[rec["kind"]], rec["value"])
            return raw
        actual = blake3.blake3(raw).hexdigest()
        if actual != digest:
            raise self._fail(
                n,
                f"blob {digest[:16]}…: digest mismatch (its content hashes to {actual[:16]}…)",
                hint="the file was changed after it was exported",
            )
        kind = KIND_CODES[rec["kind"]]
        if kind == BLOB_SUMMARY:
            value = rec["value"]
            if (
                not isinstance(value, dict)
                or set(value) != {"covers", "summary"}
                or not isinstance(value["summary"], str)
                or not isinstance(value["covers"], list)
            ):
                raise self._fail(n, f"summary {digest[:16]}… is not a summary document")
            for c in value["covers"]:
                self._need(n, c if isinstance(c, str) else "?", "a summary", tuple(KIND_NAMES))
        self._unscanned.append((n, digest, raw, rec["value"]))
        self._unscanned_bytes += len(raw)
        if len(self._unscanned) >= SCAN_BATCH or self._unscanned_bytes >= SEAL_BYTES:
            self._scan_blobs()
        self._held(digest, kind, rec["value"])
        return raw

    def _held(self, digest: str, kind: int, value: Any) -> None:
        """Note a blob read (its checks passed): its kind, whether a checkpoint may list it,
        whether a backtrack may name it as its steering.
        """
        self._kinds[digest] = kind
        if kind == _MESSAGE:
            self._listable.add(digest)
            if is_steering(value):
                self._steering.add(digest)
        elif kind == BLOB_SUMMARY:
            self._listable.add(digest)
        self.result.blobs += 1

    def _scan_blobs(self) -> None:
        """The secret scan of the blobs read since the last one: the prefilter once over
        their joined canonical bytes (canonical JSON holds no raw newline, so a blob's
        finding is a finding of the joined text), each blob on its own only when it fires.

        Raises:
            SecretError: a blob holds a credential (the first, in line order).
        """
        held, self._unscanned, self._unscanned_bytes = self._unscanned, [], 0
        if not held or not may_hold_secrets_canonical(b"\n".join(h[2] for h in held)):
            return
        for n, digest, raw, value in held:
            if may_hold_secrets_canonical(raw):
                findings = scan(value, f"line {n} (blob {digest[:16]}…)")
                if findings:
                    raise secret_error(findings, what=str(self.path))

    def _session(self, n: int, rec: dict[str, Any]) -> None:
        problem = session_id_problem(rec["uuid"])
        if problem is not None:
            raise self._fail(n, f"session id: {problem}")
        if rec["name"] is not None and (p := text_problem(rec["name"])) is not None:
            raise self._fail(n, f"session name {p}")
        for key in ("origin",):
            if rec[key] is not None:
                self._json_text(n, rec[key], f"$.{key}", must_be_object=True)
        if rec["origin"]:
            from alpstore.policy.recorded import recorded_policy

            origin = json.loads(rec["origin"])
            folder = portable_dir(origin)
            if folder is not None:
                parts = Path(folder).parts
                if Path(folder).is_absolute() or ".." in parts or not parts:
                    raise self._fail(
                        n,
                        "origin.policy.checkpoint_dir must be a path inside the run root",
                        hint="a file from another machine does not decide where this one writes",
                    )
                origin = with_dir(origin, f"/{folder}")  # validated as an absolute one
            recorded_policy(origin, where=f"{self.path}: line {n}: origin")
        self._need(n, rec["manifest"], "the manifest", (KIND_CODES["manifest"],))
        self._times(n, rec, "created_at", "updated_at")
        self._digester.feed(rec)
        self.result.session = rec

    def _json_text(self, n: int, text: str, where: str, *, must_be_object: bool) -> None:
        try:
            doc = parse_json(text, where=f"{self.path}: line {n}: {where}")
        except CanonicalJSONError as exc:
            raise CheckpointFileError(exc.message) from exc
        if must_be_object and not isinstance(doc, dict):
            raise self._fail(n, f"{where} must hold a JSON object")
        findings = scan(doc, f"line {n} {where}")
        if findings:
            raise secret_error(findings, what=str(self.path))

    def _times(self, n: int, rec: dict[str, Any], *keys: str) -> None:
        for key in keys:
            if not math.isfinite(rec[key]) or rec[key] > 1e11:
                raise self._fail(n, f"{key} is not a time")

    def _delta(self, n: int, rec: dict[str, Any], what: str) -> ListState:
        known = len(self._digester.entries)
        if rec["keep"] > known:
            raise self._fail(n, f"{what} keeps {rec['keep']} entries of a list of {known}")
        if not self._listable.issuperset(rec["add"]):  # (else each named, as _need names it)
            for d in rec["add"]:
                self._need(n, d, what, (_MESSAGE, BLOB_SUMMARY))
        state = self._digester.apply(rec["keep"], rec["add"], commit=rec["type"] == "checkpoint")
        if state.covering != rec["covering"]:
            raise self._fail(n, f"{what}: its entries do not give its covering digest")
        return state

    def _checkpoint(self, n: int, rec: dict[str, Any]) -> None:
        if rec["seq"] <= self._last_seq or rec["id"] <= self._last_id:
            raise self._fail(n, "checkpoints must come in increasing seq and id")
        for key in ("label", "trigger"):
            if rec[key] is not None and (p := text_problem(rec[key])) is not None:
                raise self._fail(n, f"checkpoint {key} {p}")
        for key in ("kernel", "wm"):
            self._need(n, rec[key], f"checkpoint {key}", (KIND_CODES["state"],))
        self._times(n, rec, "created_at")
        state = self._delta(n, rec, f"checkpoint {rec['seq']}")
        self._last_seq, self._last_id = rec["seq"], rec["id"]
        self.result.checkpoint_ids = _widen(self.result.checkpoint_ids, rec["id"])
        self._seqs.add(rec["seq"])
        self._digester.feed(rec, state)
        self.result.checkpoints += 1

    def _head(self, n: int, rec: dict[str, Any]) -> None:
        state = self._delta(n, rec, "the head")
        self._length = state.length
        self._digester.feed(rec, state)

    def _refs(self, n: int, rec: dict[str, Any], *keys: str) -> None:
        for key in keys:
            ref = rec[key]
            if ref is None:
                continue
            if "seq" not in ref:  # a checkpoint the session no longer holds: reserved on import
                self.result.checkpoint_ids = _widen(self.result.checkpoint_ids, ref["id"])
            elif ref["seq"] not in self._seqs:
                raise self._fail(n, f"{key} names checkpoint seq {ref['seq']}, not in the file")

    def _backtrack(self, n: int, rec: dict[str, Any]) -> None:
        if rec["id"] <= self._last_bt:
            raise self._fail(n, "backtracks must come in increasing id")
        self._last_bt = rec["id"]
        self.result.backtrack_ids = _widen(self.result.backtrack_ids, rec["id"])
        if rec["to"] is None:
            raise self._fail(n, "a backtrack line without the checkpoint it went to ($.to)")
        self._refs(n, rec, "from", "to")
        self._need(n, rec["steering"], "the steering message", (KIND_CODES["message"],))
        if rec["steering"] is not None and rec["steering"] not in self._steering:
            raise self._fail(
                n,
                f"the steering message {rec['steering'][:16]}… is not a user turn with text "
                "content (what a backtrack injects)",
            )
        if rec["error_signature"] is not None and len(rec["error_signature"]) > 200:
            raise self._fail(n, "error_signature is longer than 200 characters")
        self._times(n, rec, "created_at")
        self._digester.feed(rec)

    def _event(self, n: int, rec: dict[str, Any]) -> None:
        self.result.events += 1
        bound = MAX_EVENTS_PER_CHECKPOINT * (self.result.checkpoints + 1)
        if self.result.events > bound:
            raise self._fail(
                n,
                f"more than {bound} events for {self.result.checkpoints} checkpoint(s) (at most "
                f"{MAX_EVENTS_PER_CHECKPOINT} per checkpoint)",
            )
        if (p := text_problem(rec["kind"], limit=32)) is not None:
            raise self._fail(n, f"event kind {p}")
        self._refs(n, rec, "checkpoint")
        if rec["detail"] is not None:
            self._json_text(n, rec["detail"], "$.detail", must_be_object=True)
        self._times(n, rec, "created_at")
        self._digester.feed(rec)

    def _lg_thread(self, n: int, rec: dict[str, Any]) -> None:
        self._lg_line(n, rec)

    def _lg_checkpoint(self, n: int, rec: dict[str, Any]) -> None:
        self._lg_line(n, rec)

    def _lg_write(self, n: int, rec: dict[str, Any]) -> None:
        self._lg_line(n, rec)

    def _lg_line(self, n: int, rec: dict[str, Any]) -> None:
        """A LangGraph thread's line (``travel_lg``): its own checks, then the digest."""
        kinds = (KIND_CODES["message"], KIND_CODES["state"], BLOB_SUMMARY)
        self._threads.check(
            rec,
            lambda digest, what: self._need(n, digest, what, kinds),
            self._seqs,
            lambda reason: self._fail(n, reason),
        )
        if rec["type"] == "lg_thread":
            self.result.threads.append((rec["thread_id"], rec["ns"]))
        else:  # inline channel values and writes: scanned as blobs are (CK-11)
            body = rec["state"] if rec["type"] == "lg_checkpoint" else rec["doc"]
            findings = scan(body, f"line {n} ({rec['type']} {rec['checkpoint_id'][:40]})")
            if findings:
                raise secret_error(findings, what=str(self.path))
        self._digester.feed(rec)

    def _end(self, n: int, rec: dict[str, Any]) -> None:
        self.result.digest = self._digester.hexdigest()


def check_session_file(path: Path) -> Checked:
    """Read and check a whole session file with no archive (see :class:`SessionReader`).

    Raises:
        NotFoundError, CheckpointFileError, SecretError, PolicyError.
    """
    reader = SessionReader(path)
    for _ in reader.records():
        pass
    return reader.result
