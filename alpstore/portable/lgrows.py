"""The rows ``AlpstoreSaver`` keeps for a LangGraph thread, read and written without LangGraph:
packed state documents (the saver's fixed zstd dictionary, :data:`STATE_DICTIONARY`) and the
archive-local blob ids inside them, so a session file can carry a thread (``travel_lg``).

A checkpoint's state is ``{"c": checkpoint fields, "m": metadata, "v": {channel: ref},
"s": split channel}``; a task's writes are ``{"p": task path, "w": [[idx, channel, ref]]}``.
A ref is ``["i", kind, doc]`` (inline), ``["b", kind, blob]`` (a blob: its id for checkpoints,
its position among the write's items for writes) or ``["l", position, n]`` (n message blobs).
"""

from __future__ import annotations

import uuid
from typing import Any, Final

from alpstore.archive.lgstate import CODEC_LG_DICT as CODEC_LG_DICT
from alpstore.archive.lgstate import CODEC_RAW as CODEC_RAW
from alpstore.archive.lgstate import STATE_DICTIONARY as STATE_DICTIONARY
from alpstore.archive.lgstate import Packed as Packed
from alpstore.archive.lgstate import TurnDictionary as TurnDictionary
from alpstore.archive.lgstate import folded_steps as folded_steps
from alpstore.archive.lgstate import pack_doc as pack_doc
from alpstore.archive.lgstate import pack_turn as pack_turn
from alpstore.archive.lgstate import state_contexts as state_contexts
from alpstore.archive.lgstate import store_turn_dictionary as store_turn_dictionary
from alpstore.archive.lgstate import train_turn_dictionary as train_turn_dictionary
from alpstore.archive.lgstate import turn_dictionary as turn_dictionary
from alpstore.archive.lgstate import turn_samples as turn_samples
from alpstore.archive.lgstate import unpack_doc as unpack_doc
from alpstore.db import raw as rsql


def id_bytes(text: str) -> bytes:
    r"""A LangGraph id as stored: a UUID's 16 bytes, anything else ``\\0`` + UTF-8 (never 16)."""
    try:
        parsed = uuid.UUID(text)
    except ValueError:
        parsed = None
    if parsed is not None and str(parsed) == text:
        return parsed.bytes
    data = b"\0" + text.encode("utf-8")
    return data + b"\0" if len(data) == 16 else data


def id_text(data: bytes) -> str:
    """The id stored by :func:`id_bytes`."""
    if len(data) == 16:
        return str(uuid.UUID(bytes=data))
    body = data[1:-1] if len(data) == 17 and data.endswith(b"\0") else data[1:]
    return body.decode("utf-8")


SESSION_NAME_PREFIX: Final = "langgraph:"


def session_name(thread_id: str, ns: str) -> str:
    """The name of the session holding a thread's namespace (``langgraph:THREAD[ NS]``)."""
    name = SESSION_NAME_PREFIX + thread_id + (f" {ns}" if ns else "")
    return name[:200]


def thread_of(conn: Any, session_id: int) -> tuple[str, str] | None:
    """``(thread_id, checkpoint_ns)`` of the LangGraph thread namespace a session holds."""
    row = rsql.fetchone(
        conn,
        "SELECT thread_id, checkpoint_ns FROM lg_threads WHERE session_id = ? ORDER BY id",
        (session_id,),
    )
    return None if row is None else (str(row[0]), str(row[1]))
