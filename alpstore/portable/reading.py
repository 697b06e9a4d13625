"""Reading a deep file's parts: the streamed walk to its two message arrays, and the checks
of everything else (the header).

The walk hands each message to a :class:`Sink` (the importer) as it is read and returns the rest
of the document — lineage, kernel, manifest, working memory with the message arrays left empty —
for :func:`check_header`.
"""

from __future__ import annotations

import contextlib
import json
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final, Protocol

import zstandard

from alpstore.errors import CheckpointFileError, NotFoundError
from alpstore.portable.deep import BLOCK
from alpstore.portable.files import (
    MAX_DOCUMENT_BYTES,
    MAX_INT,
    MAX_MESSAGE_BYTES,
    check_depth,
    check_text_values,
    is_compressed,
    validate_document,
)
from alpstore.portable.jsonstream import JsonStream
from alpstore.rules.ids import check_session_id, check_text, shown

OPTIONAL_FIELDS: Final = ("spec_revision", "memory_seeds", "runtime_profile")
"""Top-level fields of a mas-lab file alpstore keeps (in the session's origin) and writes back."""

COMMITTED: Final = "$.working_memory[0].committed_messages"
COVERED: Final = f"$.working_memory[0].conversation_chunks.{BLOCK}.covered"


class Sink(Protocol):
    """Receives a file's messages as they are read."""

    where: str

    def message(self, obj: Any, index: int) -> None:
        """One entry of the covering list (``committed_messages``)."""

    def covered_item(self, obj: Any, index: int) -> None:
        """One entry of alpstore's ``covered`` block."""


# ---------------------------------------------------------------------- the header
@dataclass
class Header:
    """A file's small part, checked: everything but the streamed messages."""

    version: int
    session_id: str | None
    kernel: Any | None
    working_memory: Any | None
    manifest: dict[str, Any] | None
    lineage: dict[str, Any] | None
    label: str | None
    turn: int
    backtrack_count: int
    fields: dict[str, Any]
    name: str | None
    is_export: bool


def _bounded_int(doc: dict[str, Any], key: str, where: str) -> int:
    value = doc.get(key, 0)
    if type(value) is not int or not 0 <= value <= MAX_INT:
        raise CheckpointFileError(
            f"{where}: $.{key} {shown(value)} is out of range (0 to {MAX_INT}); refused"
        )
    return value


def check_header(doc: dict[str, Any], *, where: str) -> Header:
    """Validate a file's header (the document with the first agent's messages and the covered
    block left out): schema, manifest hash, ids, labels, integers, nesting.

    Raises:
        CheckpointFileError: naming the JSON path.
    """
    for key in ("kernel", "manifest", "working_memory", *OPTIONAL_FIELDS):
        if key in doc:
            check_depth(doc[key], f"{where}: $.{key}")
    check_text_values(doc, where, messages=True)  # all the import stores but the streamed part
    validate_document(doc, where=where)
    turn = _bounded_int(doc, "turn", where)
    backtracks = _bounded_int(doc, "backtrack_count", where)
    if "spec_revision" in doc:
        _bounded_int(doc, "spec_revision", where)
    label = doc.get("label")
    if label is not None:
        check_text(label, f"{where}: $.label")
    fields: dict[str, Any] = {k: doc[k] for k in OPTIONAL_FIELDS if k in doc}
    if doc["version"] == 1:
        return Header(1, None, doc["kernel"], None, None, None, label, turn, 0, fields, None, False)
    lineage = doc["lineage"]
    sid = check_session_id(lineage["session_id"], f"{where}: $.lineage.session_id")
    for key in ("parent_session_id", "root_session_id"):
        if lineage.get(key) is not None:
            check_session_id(lineage[key], f"{where}: $.lineage.{key}")
    if lineage.get("forked_from_checkpoint") is not None:
        check_text(
            lineage["forked_from_checkpoint"],
            f"{where}: $.lineage.forked_from_checkpoint",
            limit=512,
        )
    agents = [dict(a) for a in doc["working_memory"]]
    block: dict[str, Any] = {}
    wm: Any | None = agents if agents else None
    if agents:
        first = agents[0]
        chunks = first.get("conversation_chunks")
        if isinstance(chunks, dict) and isinstance(chunks.get(BLOCK), dict):
            chunks = dict(chunks)
            block = dict(chunks.pop(BLOCK))
            block.pop("covered", None)
            first["conversation_chunks"] = None if block.get("chunks_absent") else chunks
        shape = block.get("working_memory_shape")
        if shape == "value":
            wm = block.get("working_memory")
        elif shape == "none":
            wm = None
    name = block.get("name")
    if name is not None:
        check_text(name, f"{where}: $.working_memory[0].conversation_chunks.{BLOCK}.name")
    kernel: Any | None = None if block.get("kernel_absent") else doc["kernel"]
    manifest = None if block.get("manifest_absent") else doc["manifest"]["content"]
    return Header(
        2, sid, kernel, wm, manifest, lineage, label, turn, backtracks, fields, name, bool(block)
    )


# ---------------------------------------------------------------------- reading
def feed_document(doc: dict[str, Any], imp: Sink) -> dict[str, Any]:
    """Hand an in-memory document's messages to ``imp``; return the header part."""
    wm = doc.get("working_memory")
    if not isinstance(wm, list) or not wm or not isinstance(wm[0], dict):
        return doc
    first = dict(wm[0])
    messages = first.get("committed_messages")
    if isinstance(messages, list):
        for i, m in enumerate(messages):
            imp.message(m, i)
        first["committed_messages"] = []
    chunks = first.get("conversation_chunks")
    if isinstance(chunks, dict) and isinstance(chunks.get(BLOCK), dict):
        block = dict(chunks[BLOCK])
        raw = block.pop("covered", None)
        if raw is not None:
            if not isinstance(raw, list):
                raise CheckpointFileError(f"{imp.where}: {COVERED}: expected a list")
            for i, m in enumerate(raw):
                imp.covered_item(m, i)
        first["conversation_chunks"] = {**chunks, BLOCK: block}
    return {**doc, "working_memory": [first, *wm[1:]]}


def _stream_items(js: JsonStream, each: Callable[[Any, int], None]) -> list[Any]:
    for i in js.elements():
        value = js.value()
        js.release()  # the text goes before the value is canonicalised: one copy at a time
        each(value, i)
    return []


def _walk_block(js: JsonStream, imp: Sink) -> dict[str, Any]:
    block: dict[str, Any] = {}
    for key in js.members():
        if key == "covered" and js.peek() == "[":
            block[key] = _stream_items(js, imp.covered_item)
        else:
            block[key] = js.value()
    return block


def _walk_first_agent(js: JsonStream, imp: Sink) -> dict[str, Any]:
    agent: dict[str, Any] = {}
    for key in js.members():
        if key == "committed_messages" and js.peek() == "[":
            agent[key] = _stream_items(js, imp.message)
        elif key == "conversation_chunks" and js.peek() == "{":
            chunks: dict[str, Any] = {}
            for ckey in js.members():
                if ckey == BLOCK and js.peek() == "{":
                    chunks[ckey] = _walk_block(js, imp)
                else:
                    chunks[ckey] = js.value()
            agent[key] = chunks
        else:
            agent[key] = js.value()
    return agent


def stream_document(js: JsonStream, imp: Sink) -> dict[str, Any]:
    """Walk a whole deep file, handing its messages to ``imp``; return the header part.

    Raises:
        CheckpointFileError: not JSON, not an object, a duplicate key on the way to the
            messages, or whatever ``imp`` refuses.
    """
    if js.peek() != "{":
        raise CheckpointFileError(f"{js.where}: a checkpoint file must hold a JSON object")
    doc: dict[str, Any] = {}
    for key in js.members():
        if key == "working_memory" and js.peek() == "[":
            agents: list[Any] = []
            for i in js.elements():
                agents.append(
                    _walk_first_agent(js, imp) if i == 0 and js.peek() == "{" else js.value()
                )
            doc[key] = agents
        else:
            doc[key] = js.value()
    js.end()
    return doc


@contextlib.contextmanager
def open_stream(path: Path, *, limit: int | None = None) -> Iterator[JsonStream]:
    """A :class:`JsonStream` over a ``.json`` or ``.json.zst`` file (bounded, decompressed as
    it is read).

    Raises:
        NotFoundError: no such file.
        CheckpointFileError: not a regular file, unreadable, or a corrupt zstd frame.
    """
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a FIFO would block open() for ever
            raise CheckpointFileError(f"{path}: not a regular file")
        handle: IO[bytes] = path.open("rb")
    except FileNotFoundError:
        raise NotFoundError(f"{path}: no such checkpoint file") from None
    except OSError as exc:
        raise CheckpointFileError(f"{path}: cannot read ({exc.strerror})") from exc
    with handle:
        if not path.is_file():
            raise CheckpointFileError(f"{path}: not a regular file")
        reader: Any = handle
        if is_compressed(path):
            reader = zstandard.ZstdDecompressor().stream_reader(handle, read_across_frames=True)
        try:
            yield JsonStream(
                _without_bom(reader.read),
                where=str(path),
                limit=MAX_DOCUMENT_BYTES if limit is None else limit,
                value_limit=2 * MAX_MESSAGE_BYTES,
            )
        except zstandard.ZstdError as exc:
            raise CheckpointFileError(f"{path}: not a valid zstd file ({exc})") from exc
        except OSError as exc:
            raise CheckpointFileError(f"{path}: cannot read ({exc.strerror})") from exc


_BOM = b"\xef\xbb\xbf"


def _without_bom(read: Callable[[int], bytes]) -> Callable[[int], bytes]:
    """``read`` without a UTF-8 byte order mark at the start of the file (an editor's, on
    another machine: JSON's own readers accept it too).
    """
    first = True

    def read_(n: int) -> bytes:
        nonlocal first
        data = read(n)
        if first:
            first = False
            while len(data) < len(_BOM) and _BOM.startswith(data):  # a short first read
                more = read(n)
                if not more:
                    break
                data += more
            if data.startswith(_BOM):
                data = data[len(_BOM) :]
        return data

    return read_


# ---------------------------------------------------------------------- header only
class _Skip:
    """A sink that drops each message, checking (``strict``) that it is an object (the
    schema's one demand of a message).
    """

    def __init__(self, where: str, *, strict: bool) -> None:
        self.where = where
        self.strict = strict

    def message(self, obj: Any, index: int) -> None:
        if self.strict and not isinstance(obj, dict):
            raise CheckpointFileError(f"{self.where}: {COMMITTED}[{index}]: expected an object")

    def covered_item(self, obj: Any, index: int) -> None:
        if self.strict and not isinstance(obj, dict):
            raise CheckpointFileError(f"{self.where}: {COVERED}[{index}]: expected an object")


def read_header(path: Path, *, validate: bool = True) -> dict[str, Any]:
    """A deep file's header — the document with the first agent's messages and the covered
    block streamed past and left empty — checked (``validate``) against the schema and
    (version 2) its manifest hash. Memory holds one message at a time, within the deep
    importer's limits.

    Raises:
        NotFoundError, CheckpointFileError: as :func:`open_stream` and
            :func:`~alpstore.portable.files.validate_document`.
    """
    with open_stream(path) as js:
        doc = stream_document(js, _Skip(str(path), strict=validate))
    return validate_document(doc, where=str(path)) if validate else doc


# ---------------------------------------------------------------------- printing
_WALKED: Final = frozenset(
    {
        (),
        ("working_memory",),
        ("working_memory", "*"),
        ("working_memory", "*", "committed_messages"),
        ("working_memory", "*", "working_messages"),
        ("working_memory", "*", "conversation_chunks"),
        ("working_memory", "*", "conversation_chunks", BLOCK),
        ("working_memory", "*", "conversation_chunks", BLOCK, "covered"),
    }
)
"""The containers :func:`write_pretty` walks itself (the way to the message arrays); every
other value is parsed whole by ``json`` (bounded like one message)."""

_FLUSH_CHARS: Final = 1024 * 1024


class _Out:
    def __init__(self, write: Callable[[str], object] | None) -> None:
        self._write = write
        self._parts: list[str] = []
        self._size = 0

    @property
    def active(self) -> bool:
        """False on the checking pass (nothing is written)."""
        return self._write is not None

    def __call__(self, text: str) -> None:
        if self._write is None:
            return
        self._parts.append(text)
        self._size += len(text)
        if self._size >= _FLUSH_CHARS:
            self.flush()

    def flush(self) -> None:
        if self._write is not None and self._parts:
            self._write(_LONE_SURROGATE.sub(_escaped, "".join(self._parts)))
        self._parts, self._size = [], 0


_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")
"""What ``json`` decodes a lone ``\\ud800`` escape to (a pair becomes one character): no UTF-8
text holds it, so it is printed as the file spells it."""


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _pretty(js: JsonStream, out: _Out, path: tuple[str, ...], level: int) -> None:
    first = js.peek()
    if path not in _WALKED or first not in ("{", "["):
        value = js.value()
        js.release()
        if out.active:
            text = json.dumps(value, indent=2, ensure_ascii=False)
            out(text.replace("\n", "\n" + "  " * level) if level and "\n" in text else text)
        return
    inner = "\n" + "  " * (level + 1)
    opened = False
    if first == "{":
        for key in js.members():
            out(("{" if not opened else ",") + inner + json.dumps(key, ensure_ascii=False) + ": ")
            opened = True
            _pretty(js, out, (*path, key), level + 1)
        close = "}"
    else:
        for _ in js.elements():
            out(("[" if not opened else ",") + inner)
            opened = True
            _pretty(js, out, (*path, "*"), level + 1)
        close = "]"
    out("\n" + "  " * level + close if opened else ("{}" if close == "}" else "[]"))


def write_pretty(path: Path, write: Callable[[str], object]) -> None:
    """Write a checkpoint file's JSON as ``json.dumps(doc, indent=2, ensure_ascii=False)`` and a
    newline would, streamed: memory holds one message at a time, within the deep importer's
    limits. The whole file is read once before anything is written, so a bad file prints
    nothing.

    Raises:
        NotFoundError, CheckpointFileError: not JSON, not an object, a duplicate key on the way
            to the messages, too large.
    """
    for sink in (None, write):
        out = _Out(sink)
        with open_stream(path) as js:
            if js.peek() != "{":
                raise CheckpointFileError(f"{path}: a checkpoint file must hold a JSON object")
            _pretty(js, out, (), 0)
            js.end()
        out("\n")
        out.flush()
