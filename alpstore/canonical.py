"""Canonical JSON and BLAKE3 digests: the bytes every other layer agrees on, and their ids.

Canonical JSON is UTF-8, object keys sorted recursively, separators ``,`` and ``:``, non-ASCII left
unescaped. NaN, Infinity, non-string keys and non-JSON types are refused with the path inside the
document, so the same content always has one digest. ``alpstore.codec`` re-exports all of it.
Adapters whose framework stores such values write them as markers (:data:`JSON_MARKER`).
"""

from __future__ import annotations

import contextlib
import json
import math
from typing import Any, Final, NewType

import blake3

from alpstore.errors import CanonicalJSONError, NestedTooDeepError, UsageError

Digest = NewType("Digest", bytes)
"""A 32-byte BLAKE3-256 digest of a blob's canonical bytes (the public, portable id)."""

DIGEST_SIZE = 32

_encoder = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
)


MAX_DEPTH: Final = 256
"""Deepest nesting of a stored document (a message, a state, a kernel, a manifest) and of a
deep file's content, on every way in: JSON parsers and encoders recurse, and Python's stop
near 1,000 levels minus the caller's own, so a deeper document could be written and not read
back."""


def nesting_depth(value: Any, *, stop: int = MAX_DEPTH) -> int:
    """How deeply ``value`` nests (a scalar 0, ``[]`` 1), found without recursion; the walk
    stops as soon as the depth passes ``stop``.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is dict:
            children: Any = item.values()
        elif kind is list or kind is tuple:
            children = item
        else:
            continue
        if depth > deepest:
            deepest = depth
            if deepest > stop:
                return deepest
        stack.extend((c, depth + 1) for c in children if type(c) in (dict, list, tuple))
    return deepest


def brackets(text: str | bytes, start: int = 0, end: int | None = None) -> int:
    """An upper bound on the nesting depth of JSON text: its count of ``[`` and ``{`` (C speed)."""
    stop = len(text) if end is None else end
    if isinstance(text, bytes):
        return text.count(b"[", start, stop) + text.count(b"{", start, stop)
    return text.count("[", start, stop) + text.count("{", start, stop)


def _too_deep() -> NestedTooDeepError:
    return NestedTooDeepError(f"$: nested deeper than {MAX_DEPTH} levels; refused")


def _within_depth(raw: bytes, value: Any) -> bytes:
    """``raw`` when ``value`` nests at most :data:`MAX_DEPTH` deep (its brackets counted at C
    speed first: only a document with more is walked).
    """
    if brackets(raw) > MAX_DEPTH and nesting_depth(value) > MAX_DEPTH:
        raise _too_deep()
    return raw


def canonical_json(value: Any) -> bytes:
    """Return the canonical UTF-8 JSON bytes of ``value``.

    Raises:
        CanonicalJSONError: the value holds NaN/Infinity, a non-string key or a non-JSON type;
            the message names the path (``$.messages[3].content``).
        NestedTooDeepError: it nests deeper than :data:`MAX_DEPTH` (the archive could not read
            it back).
    """
    # when encoding fails, _find_problem below names where
    try:
        keys = _keys_are_strings(value)
        if keys:
            with contextlib.suppress(TypeError, ValueError, UnicodeEncodeError):
                raw = _large_utf8(value) if keys == _LARGE else None
                if raw is not None:
                    return _within_depth(raw, value)
                return _within_depth(_encoder.encode(value).encode("utf-8"), value)
    except RecursionError:
        raise _too_deep() from None
    problem = _find_problem(value, "$") or "$: not canonical JSON"
    raise CanonicalJSONError(problem)


def _not_json(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON")


_make_c_encoder: Any = getattr(json.encoder, "c_make_encoder", None)  # None without _json
_c_encoder: Any = (
    None
    if _make_c_encoder is None
    else _make_c_encoder(
        None, _not_json, json.encoder.encode_basestring, None, ":", ",", True, False, False
    )
)
"""``_encoder``'s own C encoder (the arguments ``JSONEncoder.iterencode`` passes it: keys
sorted, no NaN, non-ASCII kept), made once where ``json`` makes one per call. No cycle check:
a parsed value is a tree. The property test in tests/core checks it against ``_encoder``."""


def canonical_json_parsed(value: Any) -> bytes:
    """:func:`canonical_json` of a value ``json`` parsed (a file's message): its keys are strings
    already and it holds no cycle, so the walk that checks keys is skipped; errors are the same.

    Raises:
        CanonicalJSONError: as :func:`canonical_json`.
    """
    try:
        if _c_encoder is None:
            raw = _encoder.encode(value).encode("utf-8")
        else:
            raw = "".join(_c_encoder(value, 0)).encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError, RecursionError):
        return canonical_json(value)  # raises, naming the path
    return _within_depth(raw, value)


_scan_value: Any = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
"""``json``'s own scanner of one value (the C one where there is one): no ``object_pairs_hook``
(a repeated key keeps one of them, which the byte comparison in :func:`parse_canonical` then
finds), no whitespace skipping around it."""


def parse_canonical(data: bytes, *, limit: int) -> tuple[Any] | None:
    """``(value,)`` when ``data`` is exactly the canonical JSON of one value (what
    :func:`canonical_json` gives for it) of at most ``limit`` bytes and :data:`MAX_DEPTH`
    levels; otherwise None, whatever is wrong with it (the caller then reads it the strict
    way, whose errors name the problem).

    One parse and one encoding at C speed, compared: where a strict parse (its duplicate-key
    hook a Python call per object) and then :func:`canonical_json_parsed` of the value do the
    same work and more. Bytes equal to the encoding hold no repeated key (an object parsed
    from them would encode shorter), no NaN/Infinity (the encoder refuses them), no lone
    surrogate (valid UTF-8 holds none; an escaped one is spelled differently by the encoder),
    no whitespace, and keys in order.
    """
    if len(data) > limit:
        return None
    try:
        text = data.decode("utf-8")
        value, end = _scan_value(text, 0)
        if end != len(text):
            return None
        again = _encoder.encode(value) if _c_encoder is None else "".join(_c_encoder(value, 0))
    except (TypeError, ValueError, RecursionError, StopIteration):
        return None
    if again != text:
        return None
    # (a level takes two bytes: a short text cannot pass the bound, its brackets go uncounted)
    if (
        len(data) > 2 * MAX_DEPTH
        and brackets(data) > MAX_DEPTH
        and nesting_depth(value) > MAX_DEPTH
    ):
        return None
    return (value,)


_LARGE = 2
"""What :func:`_keys_are_strings` says of a document holding a string of at least
:data:`LARGE_STRING` characters (every key a string)."""
LARGE_STRING = 1 << 20
"""A document holding a string this long is encoded piece by piece (:func:`_large_utf8`)."""


def _keys_are_strings(value: Any) -> int:
    """1 (true) when every object key is a string (the one thing ``json`` would silently
    coerce), :data:`_LARGE` (true too) when a string of :data:`LARGE_STRING` characters or more
    is inside as well; 0 when a key is not a string.
    """
    large = False
    stack = [value]  # iterative: the data decides the depth
    if isinstance(value, dict) and type(value) is not dict:  # a subclass: keys, then values
        if not all(isinstance(k, str) for k in value):
            return 0
        stack = list(value.values())
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is dict:
            for key in node:
                if type(key) is not str:
                    return 0
            subs = node.values()
        elif kind is list or kind is tuple:
            subs = node
        else:  # the top-level value itself, when it is neither
            if kind is str and len(node) >= LARGE_STRING:
                large = True
            continue
        for sub in subs:
            sub_kind = type(sub)
            if sub_kind is dict or sub_kind is list:
                stack.append(sub)
            elif sub_kind is str and len(sub) >= LARGE_STRING:
                large = True
    return _LARGE if large else 1


_SLICE = 1 << 16


def _large_utf8(value: Any) -> bytes | None:
    """The canonical bytes of a document holding a long string, made piece by piece (a long
    string escaped and made UTF-8 a slice at a time, the pieces joined once): its text is not
    held several times over as the one-shot encoder holds it (its escaped copy, the joined
    copy, and UTF-8 made at 3 bytes a character before it is cut to size; an 8 MB tool result
    with non-ASCII text: 40 MB above the document, here 17 MB).
    Iterative; None when the document holds a type other than the exact JSON ones (the caller
    encodes it the usual way).

    Raises:
        ValueError: a NaN or infinite float.
    """
    escape = json.encoder.encode_basestring
    out: list[bytes] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is bytes:  # a literal token pushed below (a document holds no bytes)
            out.append(item)
        elif kind is str and len(item) > _SLICE:  # escaped and made UTF-8 a slice at a time
            out.append(b'"')
            for start in range(0, len(item), _SLICE):
                out.append(escape(item[start : start + _SLICE])[1:-1].encode("utf-8"))
            out.append(b'"')
        elif kind is str:
            out.append(escape(item).encode("utf-8"))
        elif item is None or item is True or item is False:
            out.append(b"null" if item is None else b"true" if item else b"false")
        elif kind is int:
            out.append(int.__repr__(item).encode())
        elif kind is float:
            if not math.isfinite(item):
                raise ValueError(f"{item!r} is not allowed in canonical JSON")
            out.append(float.__repr__(item).encode())
        elif kind is dict:
            keys = sorted(item)
            stack.append(b"}")
            for i in range(len(keys) - 1, -1, -1):
                stack.append(item[keys[i]])
                stack.append(escape(keys[i]).encode("utf-8") + b":")
                if i:
                    stack.append(b",")
            stack.append(b"{")
        elif kind is list or kind is tuple:
            stack.append(b"]")
            for i in range(len(item) - 1, -1, -1):
                stack.append(item[i])
                if i:
                    stack.append(b",")
            stack.append(b"[")
        else:
            return None
    return b"".join(out)


def _find_problem(value: Any, path: str) -> str | None:
    """Walk ``value`` and describe the first thing JSON cannot hold exactly, or None."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            if kind is str and has_lone_surrogate(item):
                return f"{where}: string holds a lone surrogate, not valid UTF-8"
            continue
        if kind is float:
            if math.isnan(item) or math.isinf(item):
                return f"{where}: {item!r} is not allowed in canonical JSON"
            continue
        if kind is dict:
            for key, sub in item.items():
                if type(key) is not str:
                    return f"{where}: object key {key!r} is not a string"
                stack.append((sub, f"{where}.{key}"))
            continue
        if kind is list or kind is tuple:
            stack.extend((sub, f"{where}[{i}]") for i, sub in enumerate(item))
            continue
        if isinstance(item, bool | int | str):
            continue
        if isinstance(item, float):
            stack.append((float(item), where))
            continue
        return f"{where}: value of type {kind.__name__} is not JSON"
    return None


def has_lone_surrogate(text: str) -> bool:
    """True when ``text`` holds a lone surrogate (it cannot be written as UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def parse_json(data: bytes | str, *, where: str) -> Any:
    """Parse JSON, refusing NaN/Infinity literals; errors name ``where`` and the position.

    Raises:
        CanonicalJSONError: the text is not strict JSON.
    """

    def _no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not allowed")

    if isinstance(data, bytes) and data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]  # a UTF-8 byte order mark is no part of the document
    elif isinstance(data, str):
        data = data.removeprefix("\ufeff")
    try:
        return json.loads(data, parse_constant=_no_constants)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise CanonicalJSONError(f"{where}: not valid JSON ({exc})") from exc


def digest_bytes(data: bytes) -> Digest:
    """BLAKE3-256 of ``data``."""
    return Digest(blake3.blake3(data).digest())


def digest_hex(d: bytes) -> str:
    """Hex spelling of a digest, as the CLI and exports show it."""
    return d.hex()


def parse_digest(text: str) -> Digest:
    """Parse a 64-character hex digest.

    Raises:
        UsageError: the text is not 64 hex characters.
    """
    cleaned = text.strip().lower()
    if len(cleaned) != 2 * DIGEST_SIZE:
        raise UsageError(f"digest {text!r}: expected 64 hex characters, got {len(cleaned)}")
    try:
        return Digest(bytes.fromhex(cleaned))
    except ValueError as exc:
        raise UsageError(f"digest {text!r}: not hexadecimal") from exc


# ---------------------------------------------------------------- values canonical JSON refuses
JSON_MARKER: Final = "_alpstore_json"
"""The one key of a *marker*: an object ``{"_alpstore_json": TEXT}`` standing for the value whose
``json.dumps`` text (ASCII, keys sorted, compact) is TEXT — NaN, ±Infinity, a string or key with
a lone surrogate, or an object that is itself ``{"_alpstore_json": …}``. Adapters whose framework
stores such values (the OpenAI Agents SDK's SQLiteSession does) encode them with
:func:`to_markers` before the archive sees them and decode with :func:`from_markers`; the archive
itself stays canonical JSON. Only an object with that single key and a string value is a marker:
beside other keys it is plain data (what a person reads is what a reader gets). docs/formats.md
"Markers"."""

_MARKER_TEXT = json.JSONEncoder(sort_keys=True, separators=(",", ":"))  # ASCII, NaN allowed


def _marker(value: Any) -> dict[str, str]:
    return {JSON_MARKER: _MARKER_TEXT.encode(value)}


def to_markers(value: Any) -> Any:
    """``value`` (as ``json.loads`` returns: string keys; dicts, lists, scalars) with every part
    canonical JSON refuses replaced by its marker (a new value; the argument is left alone).
    """
    kind = type(value)
    if kind is float:
        return value if math.isfinite(value) else _marker(value)
    if kind is str:
        return _marker(value) if has_lone_surrogate(value) else value
    if kind is list:
        return [to_markers(v) for v in value]
    if kind is dict:
        if (len(value) == 1 and JSON_MARKER in value) or any(
            type(k) is not str or has_lone_surrogate(k) for k in value
        ):
            return _marker(value)
        return {k: to_markers(v) for k, v in value.items()}
    return value


def from_markers(value: Any) -> Any:
    """The inverse of :func:`to_markers`: each marker replaced by the value its text spells. A
    marker whose text is not JSON is left as it is (stored data is hostile until checked).
    """
    kind = type(value)
    if kind is list:
        return [from_markers(v) for v in value]
    if kind is dict:
        if len(value) == 1 and type(value.get(JSON_MARKER)) is str:
            try:
                return json.loads(value[JSON_MARKER])
            except (ValueError, RecursionError):
                return value
        return {k: from_markers(v) for k, v in value.items()}
    return value
