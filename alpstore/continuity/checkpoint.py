"""``checkpoint.json``: the continuity checkpoint model, its canonical digest, reading and writing.

The file is alp-code's ``ContinuityCheckpointV1``: an objective and four kinds of pin, bound to one
execution and one policy, sealed by ``integrity.checkpointSha256``. Reading fails closed with the
reason (unreadable, not JSON, schema, digest mismatch, bound elsewhere); writing validates first and
replaces the file atomically, so a refused write leaves the old bytes in place.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from alpstore.codec import canonical_json
from alpstore.continuity.files import atomic_write, read_bounded
from alpstore.continuity.paths import EXECUTION_ID_PATTERN, ExecutionPaths
from alpstore.errors import CanonicalJSONError, ContinuityError, ValidationFinding

VERSION = 1
MAX_PIN_BYTES = 4 * 1024
"""One pin's text, in UTF-8 bytes (CT-4)."""
MAX_CHECKPOINT_BYTES = 128 * 1024
"""The whole ``checkpoint.json`` as written, in bytes (CT-4)."""

SECTIONS = ("decisions", "constraints", "openItems", "nextActions")
"""The four pin lists, in the file's (and the render's) order."""
KIND_SECTIONS: dict[str, str] = {
    "decision": "decisions",
    "constraint": "constraints",
    "open-item": "openItems",
    "next-action": "nextActions",
}
"""Pin kind as typed on the command line → the list it lives in."""
PIN_SOURCES = ("execution", "principal", "agent")
RUNTIMES = ("claude", "codex")
UNBOUND_POLICY = ""
"""``policyHash`` of a checkpoint created by a pin before any prepare step bound it to a policy."""

_TOP_KEYS = (
    "version",
    "executionId",
    "policyHash",
    "runtime",
    "createdAt",
    "updatedAt",
    "objective",
    *SECTIONS,
    "integrity",
)
_PIN_KEYS = ("id", "text", "source", "createdAt")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Pin:
    """One thing the execution must not forget.

    Attributes:
        id: a UUID (string), unique within the checkpoint.
        text: one sentence, non-empty, at most 4 KiB of UTF-8.
        source: who pinned it: ``execution``, ``principal`` or ``agent``.
        created_at: ISO 8601 timestamp of the pin.
    """

    id: str
    text: str
    source: str
    created_at: str

    def to_json(self) -> dict[str, Any]:
        """The pin as alp-code writes it (key order included)."""
        return {
            "id": self.id,
            "text": self.text,
            "source": self.source,
            "createdAt": self.created_at,
        }


@dataclass(frozen=True)
class Checkpoint:
    """A continuity checkpoint (CT-1), without its integrity field (derived on write).

    Attributes:
        execution_id: the execution it belongs to.
        policy_hash: the policy it was prepared under (``""`` until a prepare step binds it).
        runtime: ``claude``, ``codex`` or None until an adapter really launches.
        created_at: when it was first written.
        updated_at: when a writer last changed it.
        objective: the task it was seeded from, or None.
        sections: the four pin lists keyed by their JSON names (see :data:`SECTIONS`).
    """

    execution_id: str
    policy_hash: str
    runtime: str | None
    created_at: str
    updated_at: str
    objective: str | None
    sections: Mapping[str, tuple[Pin, ...]] = field(
        default_factory=lambda: {name: () for name in SECTIONS}
    )

    def pins(self, section: str) -> tuple[Pin, ...]:
        """Return the pins of one section (see :data:`SECTIONS`)."""
        return self.sections.get(section, ())

    def all_pins(self) -> list[tuple[str, Pin]]:
        """Every pin with its section name, sections in file order."""
        return [(name, pin) for name in SECTIONS for pin in self.pins(name)]

    def with_sections(self, sections: Mapping[str, tuple[Pin, ...]], updated_at: str) -> Checkpoint:
        """A copy with new pin lists and ``updatedAt``."""
        return replace(self, sections=dict(sections), updated_at=updated_at)

    def body(self) -> dict[str, Any]:
        """The JSON body without ``integrity``, keys in alp-code's order."""
        doc: dict[str, Any] = {
            "version": VERSION,
            "executionId": self.execution_id,
            "policyHash": self.policy_hash,
            "runtime": self.runtime,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
            "objective": self.objective,
        }
        for name in SECTIONS:
            doc[name] = [pin.to_json() for pin in self.pins(name)]
        return doc


def checkpoint_digest(doc: Mapping[str, Any]) -> str:
    """SHA-256 hex of the canonical body: ``integrity`` left out, keys sorted recursively, compact.

    This is the spelling of JavaScript's ``JSON.stringify`` on a key-sorted object (non-ASCII
    unescaped), so alp-code and alpstore agree on every digest.

    Raises:
        CanonicalJSONError: the document holds something JSON cannot (NaN, a lone surrogate…).
    """
    body = {key: value for key, value in doc.items() if key != "integrity"}
    return hashlib.sha256(canonical_json(body)).hexdigest()


def digest_matches(doc: Mapping[str, Any]) -> bool:
    """True when ``doc``'s recorded ``integrity.checkpointSha256`` is its canonical digest."""
    integrity = doc.get("integrity")
    recorded = integrity.get("checkpointSha256") if isinstance(integrity, dict) else None
    try:
        return recorded == checkpoint_digest(doc)
    except CanonicalJSONError:
        return False


def encode_checkpoint(checkpoint: Checkpoint) -> bytes:
    """The file's bytes: pretty-printed with a 2-space indent plus a newline, digest included.

    Raises:
        ContinuityError: a pin breaks a limit, or the file would exceed 128 KiB.
    """
    problem = _check_limits(checkpoint)
    if problem is not None:
        raise ContinuityError(f"{checkpoint.execution_id}: {problem}; nothing written")
    doc = checkpoint.body()
    doc["integrity"] = {"checkpointSha256": checkpoint_digest(doc)}
    data = (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    if len(data) > MAX_CHECKPOINT_BYTES:
        raise ContinuityError(
            f"{checkpoint.execution_id}: checkpoint would be {len(data)} bytes, over the "
            f"{MAX_CHECKPOINT_BYTES // 1024} KiB limit; nothing written",
            hint="unpin something first (alpstore context unpin ID)",
        )
    return data


def _check_limits(checkpoint: Checkpoint) -> str | None:
    """Describe the first pin that breaks the format's rules, or None."""
    seen: set[str] = set()
    for name, pin in checkpoint.all_pins():
        if not pin.text:
            return f"{name}: pin {pin.id} has empty text"
        size = len(pin.text.encode("utf-8"))
        if size > MAX_PIN_BYTES:
            return f"{name}: pin of {size} bytes is over the {MAX_PIN_BYTES // 1024} KiB limit"
        if pin.source not in PIN_SOURCES:
            return f"{name}: pin source {pin.source!r} is not one of {', '.join(PIN_SOURCES)}"
        if pin.id in seen:
            return f"{name}: pin id {pin.id} appears twice"
        seen.add(pin.id)
    return None


def write_checkpoint(paths: ExecutionPaths, checkpoint: Checkpoint) -> bytes:
    """Validate and atomically write ``checkpoint.json``; return the bytes written.

    Raises:
        ContinuityError: the checkpoint breaks a limit (nothing on disk changes).
        StorageError: the file system refused the write.
    """
    if checkpoint.execution_id != paths.execution_id:
        raise ContinuityError(
            f"checkpoint of {checkpoint.execution_id} cannot be written for {paths.execution_id}"
        )
    data = encode_checkpoint(checkpoint)
    atomic_write(paths.checkpoint, data)
    return data


def read_checkpoint_bytes(paths: ExecutionPaths) -> bytes | None:
    """The raw bytes of ``checkpoint.json`` (at most one byte over the limit), None if missing.

    Raises:
        ValidationFinding: the file exists but cannot be read.
    """
    try:
        return read_bounded(paths.checkpoint, MAX_CHECKPOINT_BYTES)
    except OSError as exc:
        raise ValidationFinding(
            f"{paths.execution_id}: checkpoint.json is unreadable ({exc.strerror or exc})"
        ) from exc


def read_checkpoint(paths: ExecutionPaths, *, policy_hash: str | None = None) -> Checkpoint | None:
    """Read and verify ``checkpoint.json``; None when the execution has none yet.

    Verification is everything alp-code checks: size, JSON, schema, digest, and the binding to
    this execution (and to ``policy_hash`` when given).

    Raises:
        ValidationFinding: one line naming the first reason the file cannot be trusted.
    """
    data = read_checkpoint_bytes(paths)
    if data is None:
        return None
    return verify_checkpoint(data, paths.execution_id, policy_hash=policy_hash)


def verify_checkpoint(
    data: bytes, execution_id: str, *, policy_hash: str | None = None
) -> Checkpoint:
    """Decode and verify the bytes of a checkpoint file of ``execution_id``.

    Raises:
        ValidationFinding: the bytes are oversize, not JSON, off-schema, tampered with, or bound
            to another execution or policy.
    """
    where = f"{execution_id}: checkpoint.json"
    doc = parse_checkpoint_document(data, where)
    checkpoint = decode_checkpoint(doc, where)
    recorded = doc["integrity"]["checkpointSha256"]
    try:
        computed = checkpoint_digest(doc)
    except CanonicalJSONError as exc:
        raise ValidationFinding(f"{where}: schema: {exc}") from exc
    if recorded != computed:
        raise ValidationFinding(
            f"{where}: digest mismatch (recorded {recorded[:12]}…, computed {computed[:12]}…): "
            "the file was changed outside `context prepare|pin|unpin`"
        )
    if checkpoint.execution_id != execution_id:
        raise ValidationFinding(
            f"{where}: bound to execution {checkpoint.execution_id}, not {execution_id}"
        )
    if policy_hash is not None and checkpoint.policy_hash != policy_hash:
        shown = checkpoint.policy_hash or "(none)"
        raise ValidationFinding(f"{where}: bound to policy {shown}, not {policy_hash}")
    return checkpoint


def parse_checkpoint_document(data: bytes, where: str) -> dict[str, Any]:
    """Parse the file's JSON object.

    Raises:
        ValidationFinding: oversize, not UTF-8 JSON, or not an object.
    """
    if len(data) > MAX_CHECKPOINT_BYTES:
        raise ValidationFinding(f"{where}: over the {MAX_CHECKPOINT_BYTES // 1024} KiB limit")

    def _no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=_no_constants)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ValidationFinding(f"{where}: not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise ValidationFinding(f"{where}: schema: the top level is not an object")
    return doc


def decode_checkpoint(doc: Mapping[str, Any], where: str) -> Checkpoint:
    """Check ``doc`` against the checkpoint schema and build the model.

    Raises:
        ValidationFinding: ``schema: <path>: <what>`` for the first violation.
    """

    def fail(path: str, what: str) -> ValidationFinding:
        return ValidationFinding(f"{where}: schema: {path}: {what}")

    unknown = sorted(set(doc) - set(_TOP_KEYS))
    if unknown:
        raise fail("$", f"unknown key {unknown[0]!r}")
    missing = [key for key in _TOP_KEYS if key not in doc]
    if missing:
        raise fail("$", f"missing key {missing[0]!r}")
    if type(doc["version"]) is not int or doc["version"] != VERSION:
        raise fail("$.version", f"expected {VERSION}, got {doc['version']!r}")
    execution_id = doc["executionId"]
    if not isinstance(execution_id, str) or not EXECUTION_ID_PATTERN.fullmatch(execution_id):
        raise fail("$.executionId", "not an execution id (^exec_[a-zA-Z0-9_-]+$)")
    if not isinstance(doc["policyHash"], str):
        raise fail("$.policyHash", "not a string")
    if doc["runtime"] is not None and doc["runtime"] not in RUNTIMES:
        raise fail("$.runtime", "expected 'claude', 'codex' or null")
    for key in ("createdAt", "updatedAt"):
        if not isinstance(doc[key], str) or not doc[key]:
            raise fail(f"$.{key}", "not a timestamp string")
    if doc["objective"] is not None and not isinstance(doc["objective"], str):
        raise fail("$.objective", "expected a string or null")
    integrity = doc["integrity"]
    if (
        not isinstance(integrity, dict)
        or set(integrity) != {"checkpointSha256"}
        or not isinstance(integrity["checkpointSha256"], str)
        or not _SHA256_HEX.fullmatch(integrity["checkpointSha256"])
    ):
        raise fail("$.integrity", "expected {checkpointSha256: <64 lowercase hex>}")
    sections: dict[str, tuple[Pin, ...]] = {}
    seen: set[str] = set()
    for name in SECTIONS:
        items = doc[name]
        if not isinstance(items, list):
            raise fail(f"$.{name}", "not a list")
        pins: list[Pin] = []
        for index, item in enumerate(items):
            pin = decode_pin(item, f"$.{name}[{index}]", fail)
            if pin.id in seen:
                raise fail(f"$.{name}[{index}].id", f"pin id {pin.id} appears twice")
            seen.add(pin.id)
            pins.append(pin)
        sections[name] = tuple(pins)
    return Checkpoint(
        execution_id=execution_id,
        policy_hash=doc["policyHash"],
        runtime=doc["runtime"],
        created_at=doc["createdAt"],
        updated_at=doc["updatedAt"],
        objective=doc["objective"],
        sections=sections,
    )


def decode_pin(item: Any, path: str, fail: Callable[[str, str], Exception]) -> Pin:
    """Check one pin object; ``fail(path, what)`` builds the error to raise."""
    if not isinstance(item, dict):
        raise fail(path, "a pin is an object")
    if set(item) != set(_PIN_KEYS):
        extra = sorted(set(item) ^ set(_PIN_KEYS))
        raise fail(path, f"a pin has exactly id, text, source, createdAt (not {extra[0]!r})")
    for key in _PIN_KEYS:
        if not isinstance(item[key], str):
            raise fail(f"{path}.{key}", "not a string")
    if not item["id"]:
        raise fail(f"{path}.id", "empty")
    if not item["text"]:
        raise fail(f"{path}.text", "empty")
    try:
        size = len(item["text"].encode("utf-8"))
    except UnicodeEncodeError:
        raise fail(f"{path}.text", "not valid UTF-8 (lone surrogate)") from None
    if size > MAX_PIN_BYTES:
        raise fail(f"{path}.text", f"{size} bytes, over the {MAX_PIN_BYTES // 1024} KiB limit")
    if item["source"] not in PIN_SOURCES:
        raise fail(f"{path}.source", f"expected one of {', '.join(PIN_SOURCES)}")
    return Pin(
        id=item["id"], text=item["text"], source=item["source"], created_at=item["createdAt"]
    )
