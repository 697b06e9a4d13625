"""The session file format (``alpstore.session`` version 1): line schemas, the line order, and
the session digest.

A session file is JSON Lines (optionally one zstd stream, ``.zst``): a header line, every blob
the session needs once (by digest, covered blobs before the summary covering them), the session
line, its checkpoints in ``seq`` order as keep + add deltas of the previous checkpoint's
covering list, the head (a delta of the last checkpoint), its backtracks and events in the
order they happened, and an end line with the line count and the session digest. docs/formats.md
describes every field. Checkpoints, backtracks and events refer to checkpoints by ``seq`` (the
session's own number); the archive-local ids travel beside it so an import can keep them when
they are free (``travel_import``).

The session digest (:class:`Digester`) is BLAKE3 over canonical JSON documents of the session,
every checkpoint (its covering list as a hash of its entries' digests), the head, every
backtrack and event — by ``seq``, never by an archive-local id — so it is equal on every
archive holding the same session. Blob contents enter it through their digests (each blob line
is checked against its digest on import).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import blake3

from alpstore.canonical import parse_canonical
from alpstore.codec import canonical_json, canonical_json_parsed, digest_hex
from alpstore.db.names import BLOB_KINDS
from alpstore.portable.files import MAX_INT, MAX_MESSAGE_BYTES
from alpstore.portable.travel_header import FORMAT as FORMAT
from alpstore.portable.travel_lg import LG_ORDER, LG_SCHEMAS, digest_doc
from alpstore.views import cover_add, cover_bytes, cover_sub

VERSION: Final = 1
KIND_NAMES: Final = dict(BLOB_KINDS)
KIND_CODES: Final = {name: code for code, name in BLOB_KINDS.items()}
LINE_LIMIT: Final = 2 * MAX_MESSAGE_BYTES
"""Longest line read (a blob line holds one message of at most MAX_MESSAGE_BYTES, escaped)."""
HEX64: Final = r"^[0-9a-f]{64}$"

_REF = {
    "oneOf": [
        {"type": "null"},
        {
            "type": "object",
            "properties": {
                "seq": {"type": "integer", "minimum": 1, "maximum": MAX_INT},
                "id": {"type": "integer", "minimum": 1, "maximum": MAX_INT},
            },
            "additionalProperties": False,
            "minProperties": 1,
        },
    ]
}
_DIGEST = {"type": "string", "pattern": HEX64}
_OPT_DIGEST = {"oneOf": [{"type": "null"}, _DIGEST]}
_COUNT = {"type": "integer", "minimum": 0, "maximum": MAX_INT}
_TIME = {"type": "number", "minimum": 0}
_OPT_TEXT = {"type": ["string", "null"]}
_DELTA = {"keep": _COUNT, "add": {"type": "array"}, "covering": _DIGEST}
"""(``add``'s items, digests, are checked with :data:`HEX` directly: far faster.)"""
HEX = re.compile(r"[0-9a-f]{64}")


def _obj(props: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {"type": {"type": "string"}, **props},
        "required": ["type", *props],
        "additionalProperties": False,
    }


LINE_SCHEMAS: Final[dict[str, dict[str, Any]]] = {
    "blob": _obj({"digest": _DIGEST, "kind": {"enum": sorted(KIND_CODES)}, "value": {}}),
    "session": _obj(
        {
            "uuid": {"type": "string"},
            "name": _OPT_TEXT,
            "status": {"enum": ["created", "active", "paused", "terminated"]},
            "turn": _COUNT,
            "backtrack_count": _COUNT,
            "retention": {
                "type": "object",
                "properties": {
                    "mode": {"enum": ["all", "single", "last_n"]},
                    "n": {"type": "integer", "minimum": 1, "maximum": MAX_INT},
                },
                "required": ["mode", "n"],
                "additionalProperties": False,
            },
            "origin": _OPT_TEXT,
            "manifest": _OPT_DIGEST,
            "created_at": _TIME,
            "updated_at": _TIME,
            "parent": {
                "oneOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "properties": {
                            "session": {"type": "string"},
                            "seq": {"type": "integer", "minimum": 1, "maximum": MAX_INT},
                            "covering": _OPT_DIGEST,
                        },
                        "required": ["session", "seq", "covering"],
                        "additionalProperties": False,
                    },
                ]
            },
        }
    ),
    "checkpoint": _obj(
        {
            "id": {"type": "integer", "minimum": 1, "maximum": MAX_INT},
            "seq": {"type": "integer", "minimum": 1, "maximum": MAX_INT},
            "turn": _COUNT,
            "label": _OPT_TEXT,
            "trigger": _OPT_TEXT,
            "abandoned": {"type": "boolean"},
            "created_at": _TIME,
            "kernel": _OPT_DIGEST,
            "wm": _OPT_DIGEST,
            **_DELTA,
        }
    ),
    "head": _obj(_DELTA),
    "backtrack": _obj(
        {
            "id": {"type": "integer", "minimum": 1, "maximum": MAX_INT},
            "from": _REF,
            "to": _REF,
            "steps": _COUNT,
            "steering": _OPT_DIGEST,
            "automatic": {"type": "boolean"},
            "error_signature": _OPT_TEXT,
            "created_at": _TIME,
        }
    ),
    "event": _obj(
        {"kind": {"type": "string"}, "checkpoint": _REF, "detail": _OPT_TEXT, "created_at": _TIME}
    ),
    **LG_SCHEMAS,  # a LangGraph thread's rows (travel_lg)
    "end": _obj({"lines": _COUNT, "digest": _DIGEST}),
}
ORDER: Final = ("blob", "session", "checkpoint", "head", "backtrack", "event", *LG_ORDER, "end")
"""The order the line types come in (each type's lines together)."""


# The hot lines' schemas checked by hand: True only when the line certainly passes its schema in
# LINE_SCHEMAS (every check here is as strict or stricter: exact types, ``fullmatch`` for a
# digest), so a line it does not vouch for goes through jsonschema, which names the problem.
# tests/portable/test_travel_fast_schema.py holds the two to each other with hypothesis.
def _count(v: Any, low: int = 0) -> bool:
    return type(v) is int and low <= v <= MAX_INT


def _time(v: Any) -> bool:
    return type(v) in (int, float) and v >= 0


def _opt_text(v: Any) -> bool:
    return v is None or type(v) is str


def _digest(v: Any) -> bool:
    return type(v) is str and HEX.fullmatch(v) is not None


def _opt_digest(v: Any) -> bool:
    return v is None or _digest(v)


def _delta(rec: dict[str, Any]) -> bool:
    return _count(rec["keep"]) and type(rec["add"]) is list and _digest(rec["covering"])


_KEYS: Final = {kind: frozenset(schema["required"]) for kind, schema in LINE_SCHEMAS.items()}
_RETENTION_KEYS: Final = frozenset({"mode", "n"})
_PARENT_KEYS: Final = frozenset({"session", "seq", "covering"})


def _checkpoint_ok(rec: dict[str, Any]) -> bool:
    return (
        _count(rec["id"], 1)
        and _count(rec["seq"], 1)
        and _count(rec["turn"])
        and _opt_text(rec["label"])
        and _opt_text(rec["trigger"])
        and type(rec["abandoned"]) is bool
        and _time(rec["created_at"])
        and _opt_digest(rec["kernel"])
        and _opt_digest(rec["wm"])
        and _delta(rec)
    )


def _session_ok(rec: dict[str, Any]) -> bool:
    retention, parent = rec["retention"], rec["parent"]
    return (
        type(rec["uuid"]) is str
        and _opt_text(rec["name"])
        and rec["status"] in ("created", "active", "paused", "terminated")
        and _count(rec["turn"])
        and _count(rec["backtrack_count"])
        and type(retention) is dict
        and retention.keys() == _RETENTION_KEYS
        and retention["mode"] in ("all", "single", "last_n")
        and _count(retention["n"], 1)
        and _opt_text(rec["origin"])
        and _opt_digest(rec["manifest"])
        and _time(rec["created_at"])
        and _time(rec["updated_at"])
        and (
            parent is None
            or (
                type(parent) is dict
                and parent.keys() == _PARENT_KEYS
                and type(parent["session"]) is str
                and _count(parent["seq"], 1)
                and _opt_digest(parent["covering"])
            )
        )
    )


_FAST: Final[dict[str, Any]] = {
    "checkpoint": _checkpoint_ok,
    "head": _delta,
    "session": _session_ok,
    "end": lambda rec: _count(rec["lines"]) and _digest(rec["digest"]),
}


def certainly_valid(rec: dict[str, Any]) -> bool:
    """True when the session-file line ``rec`` (its ``type`` one of ``LINE_SCHEMAS``) certainly
    passes its line schema, checked by hand for the session, checkpoint, head and end lines;
    False means "ask jsonschema" (the line may still be valid: another type, or a spelling
    the hand check does not vouch for, such as ``1.0`` for an integer).
    """
    kind = rec["type"]
    check = _FAST.get(kind)
    return check is not None and rec.keys() == _KEYS[kind] and bool(check(rec))


_BLOB_HEAD: Final = b'{"type":"blob","digest":"'
_BLOB_KIND: Final = b'","kind":"'
_BLOB_VALUE: Final = b'","value":'
_KIND_NAMES: Final = {name.encode(): name for name in KIND_CODES}
_HEX_BYTES: Final = b"0123456789abcdef"


def blob_line(line: bytes) -> tuple[dict[str, Any], bytes] | None:
    """``(record, canonical bytes of its value)`` of a blob line spelled exactly as an export
    writes it (``travel_export._BLOB_LINE``: these keys in this order, no space, the value its
    canonical JSON of at most :data:`MAX_MESSAGE_BYTES`, a known kind, a lowercase digest), read
    in one parse and one encoding of the value (``canonical.parse_canonical``); None for any
    other line, which the strict reading then takes (its errors, its canonical form: a line
    another writer spelled otherwise is read as before).

    The record is the one the strict parse gives for the same line: every byte outside the
    value is fixed here, so no key can repeat or be missing.
    """
    if not (
        line.startswith(_BLOB_HEAD) and line.startswith(_BLOB_KIND, 89) and line.endswith(b"}")
    ):
        return None
    end = line.find(_BLOB_VALUE, 99, 99 + 24)
    name = _KIND_NAMES.get(line[99:end]) if end > 0 else None
    digest = line[25:89]
    if name is None or digest.translate(None, _HEX_BYTES):  # (what is left is not hex)
        return None
    raw = line[end + len(_BLOB_VALUE) : -1]
    parsed = parse_canonical(raw, limit=MAX_MESSAGE_BYTES)
    if parsed is None:
        return None
    return {"type": "blob", "digest": digest.decode(), "kind": name, "value": parsed[0]}, raw


def schema_errors(schemas: dict[str, Any], kind: str, rec: dict[str, Any]) -> list[Any]:
    """The line's schema errors, first by path (jsonschema, loaded by the first line that
    needs it: the hot lines are checked by hand, ``certainly_valid``).
    """
    if kind not in schemas:
        import jsonschema

        schemas[kind] = jsonschema.Draft7Validator(LINE_SCHEMAS[kind])
    return sorted(schemas[kind].iter_errors(rec), key=lambda e: list(e.path))


def is_steering(value: Any) -> bool:
    """True when ``value`` is a message a backtrack may inject as its steering: a user turn
    whose content is text (what ``Session.backtrack(steering=…)`` writes).
    """
    return (
        isinstance(value, dict)
        and value.get("role") == "user"
        and isinstance(value.get("content"), str)
    )


def portable_dir(origin: Any) -> str | None:
    """The recorded policy's ``checkpoint_dir`` in ``origin`` (a dict), if any."""
    policy = origin.get("policy") if isinstance(origin, dict) else None
    folder = policy.get("checkpoint_dir") if isinstance(policy, dict) else None
    return folder if isinstance(folder, str) else None


def with_dir(origin: dict[str, Any], folder: str | None) -> dict[str, Any]:
    """``origin`` with its recorded policy's ``checkpoint_dir`` replaced."""
    return {**origin, "policy": {**origin["policy"], "checkpoint_dir": folder}}


ZERO: Final = bytes(32)


@dataclass(frozen=True)
class ListState:
    """A covering list after a keep + add delta: length, entries hash (hex), covering digest."""

    length: int
    entries: str
    cover: int

    @property
    def covering(self) -> str:
        """The covering digest, hex (as the file spells it)."""
        return digest_hex(cover_bytes(self.cover))


def _seq_of(ref: dict[str, Any] | None) -> int | None:
    return None if ref is None else ref.get("seq")


class Digester:
    """The session digest, fed the non-blob lines of a session file in order."""

    def __init__(self) -> None:
        self._hash = blake3.blake3(f"{FORMAT} digest {VERSION}\n".encode())
        self.entries: list[bytes] = []
        """The previous checkpoint's covering list (entry digests)."""
        self._chain: list[bytes] = [ZERO]
        """``_chain[i]``: the entries hash of its first ``i`` entries."""
        self._cover = 0

    def apply(
        self,
        keep: int,
        add: Sequence[str],
        *,
        commit: bool,
        added: Sequence[bytes] | None = None,
    ) -> ListState:
        """The list ``keep`` + ``add`` makes of the previous checkpoint's, in O(dropped +
        added): the entries hash is chained (``h_i = BLAKE3(h_{i-1} || digest_i)``, ``h_0`` 32
        zero bytes), the covering digest kept as a sum. ``commit``: it becomes the previous
        checkpoint's list (a checkpoint line; the head's is not). ``added``: ``add`` as bytes,
        when the caller has them (an export: no hex round trip).
        """
        entries, chain = (
            (self.entries, self._chain) if commit else (self.entries[:], self._chain[:])
        )
        cover = cover_sub(self._cover, keep, entries[keep:])
        del entries[keep:]
        del chain[keep + 1 :]
        if added is None:
            added = [bytes.fromhex(d) for d in add]
        last = chain[-1]
        hasher = blake3.blake3
        for d in added:
            last = hasher(last + d).digest()
            chain.append(last)
        entries.extend(added)
        cover = cover_add(cover, keep, added)
        if commit:
            self._cover = cover
        return ListState(len(entries), last.hex(), cover)

    def feed(self, rec: dict[str, Any], state: ListState | None = None) -> None:
        """Add one checked non-blob line (blob lines and the end line add nothing); ``state``:
        what :meth:`apply` gave for a checkpoint or head line (else it is applied here).
        """
        kind = rec["type"]
        if kind == "session":
            doc: dict[str, Any] = {
                k: rec[k]
                for k in ("uuid", "status", "turn", "backtrack_count", "retention", "manifest")
            }
            doc["created_at"] = rec["created_at"]
            doc["origin"] = json.loads(rec["origin"]) if rec["origin"] else None
        elif kind in ("checkpoint", "head"):
            if state is None:
                state = self.apply(rec["keep"], rec["add"], commit=kind == "checkpoint")
            doc = {"length": state.length, "entries": state.entries}
            if kind == "checkpoint":
                doc.update(
                    {
                        k: rec[k]
                        for k in (
                            "seq",
                            "turn",
                            "label",
                            "trigger",
                            "abandoned",
                            "created_at",
                            "kernel",
                            "wm",
                        )
                    }
                )
        elif kind == "backtrack":
            doc = {k: v for k, v in rec.items() if k not in ("id", "from", "to")}
            doc["from"], doc["to"] = _seq_of(rec["from"]), _seq_of(rec["to"])
        elif kind == "event":
            doc = {k: v for k, v in rec.items() if k != "checkpoint"}
            doc["checkpoint"] = _seq_of(rec["checkpoint"])
            doc["detail"] = json.loads(rec["detail"]) if rec["detail"] else None
        elif kind in LG_SCHEMAS:
            doc = dict(digest_doc(rec))
        else:
            return
        doc["type"] = kind
        # a checkpoint's or the head's document is made here of strings, numbers, booleans and
        # None under string keys: the key walk of canonical_json has nothing to find (same bytes)
        encode = canonical_json_parsed if kind in ("checkpoint", "head") else canonical_json
        self._hash.update(encode(doc) + b"\n")

    def hexdigest(self) -> str:
        """The digest so far, hex."""
        return self._hash.hexdigest()
