"""Reading covering lists for debugging: blob ids first, content only where it is needed.

Comparing two views by their blob ids (surrogate keys: equal ids mean equal content) is cheap;
hydrating is not. The debug tools therefore read ids, find what differs, and hydrate only that.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import TYPE_CHECKING, Any

from alpstore.codec import Digest
from alpstore.db.names import BLOB_SUMMARY
from alpstore.rules.messages import message_line, render
from alpstore.sessions import CheckpointInfo, Entry
from alpstore.views import View

if TYPE_CHECKING:
    from alpstore.core.store import CoreStore as Store

DEFAULT_WIDTH = 100
"""Entry lines are cut at this many characters unless the caller asks otherwise."""


def view_ids(store: Store, view: View) -> list[int]:
    """The blob ids of a view, in order (one range scan per segment, nothing decompressed)."""
    if view.segment_id is None or view.length == 0:
        return []
    with store.db.read() as conn:
        return store.views.read_ids(conn, view)


def load_entries(store: Store, ids: Iterable[int]) -> dict[int, Entry]:
    """Hydrate the given blob ids (each once) into entries keyed by id."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return {}
    with store.db.read() as conn:
        loaded = store.archive.load_by_ids(conn, wanted)
    return {i: to_entry(*loaded[i]) for i in wanted}


def to_entry(digest: Digest, kind: int, value: Any) -> Entry:
    """An :class:`Entry` from a loaded blob."""
    if kind == BLOB_SUMMARY:
        covers = tuple(Digest(bytes.fromhex(h)) for h in value.get("covers", []))
        return Entry(digest, "summary", value, covers)
    return Entry(digest, "message", value)


def blob_ids_for(store: Store, digests: Sequence[Digest]) -> dict[bytes, int]:
    """Surrogate ids of stored digests (unknown ones are absent)."""
    if not digests:
        return {}
    with store.db.read() as conn:
        return store.archive.ids_for(conn, list(digests))


def history_jsonl(entries: Sequence[Entry], cache: dict[bytes, str] | None = None) -> str:
    """The hydrated history as JSON Lines, one entry's document per line (what ``--grep``
    searches and what ``--exec`` reads on stdin). ``cache`` keeps each entry's line by digest
    across calls (bisect hydrates overlapping histories).
    """
    if cache is None:
        cache = {}
    out = []
    for e in entries:
        line = cache.get(e.digest)
        if line is None:
            line = json.dumps(e.value, ensure_ascii=False, sort_keys=True) + "\n"
            cache[e.digest] = line
        out.append(line)
    return "".join(out)


def entry_text(e: Entry) -> tuple[str, str]:
    """``(role, text)`` of an entry, for one-line display."""
    if e.kind == "summary":
        return f"summary of {len(e.covers)}", str(e.value.get("summary", ""))
    return render(e.value)


def shown_text(entries: Sequence[Entry], cache: dict[bytes, str] | None = None) -> str:
    """The history as shown, one ``role: text`` line an entry (tool calls with their names and
    arguments): what ``--grep`` searches. ``cache`` keeps each line by digest across calls.
    """
    if cache is None:
        cache = {}
    out = []
    for e in entries:
        line = cache.get(e.digest)
        if line is None:
            if e.kind == "summary":
                role, text = entry_text(e)
                line = f"{role}: {' '.join(text.split())}\n"
            else:
                line = message_line(e.value) + "\n"
            cache[e.digest] = line
        out.append(line)
    return "".join(out)


def entry_line(index: int | None, e: Entry, width: int = DEFAULT_WIDTH) -> str:
    """One display line: ``[index] role: text`` cut to ``width`` characters (0: never)."""
    role, text = entry_text(e)
    where = f"[{index}] " if index is not None else ""
    line = f"{where}{role}: {' '.join(text.split())}"
    if width and len(line) > width:
        line = line[: width - 1] + "…"
    return line


def short(digest: bytes) -> str:
    """The first 12 hex digits of a digest, as the debug output shows it."""
    return digest.hex()[:12]


@dataclass(frozen=True)
class Delta:
    """How a view differs from a previous one: the shared prefix, then what was cut and added.

    ``removed`` and ``added`` are ``(position, blob id)`` pairs in the old and new view.
    """

    common: int
    removed: list[tuple[int, int]]
    added: list[tuple[int, int]]


def delta(old: Sequence[int], new: Sequence[int]) -> Delta:
    """The difference between two id lists: the shared prefix, then an ordered diff of the rest
    (entries re-appended unchanged after a splice, such as a fold's tail, count as neither).
    """
    common = 0
    for a, b in zip(old, new, strict=False):
        if a != b:
            break
        common += 1
    if common == len(old) or common == len(new):  # one is a prefix of the other: no matcher
        return Delta(
            common,
            [(i, old[i]) for i in range(common, len(old))],
            [(i, new[i]) for i in range(common, len(new))],
        )
    matcher = SequenceMatcher(None, old[common:], new[common:], autojunk=False)
    removed: list[tuple[int, int]] = []
    added: list[tuple[int, int]] = []
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        removed.extend((common + i, old[common + i]) for i in range(i1, i2))
        added.extend((common + j, new[common + j]) for j in range(j1, j2))
    return Delta(common, removed, added)


def checkpoint_ref(ck: CheckpointInfo) -> str:
    """``session@turn (checkpoint id)``: how the debug output names a checkpoint."""
    return f"{ck.session}@{ck.turn} (checkpoint {ck.id})"
