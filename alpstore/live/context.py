"""A live session's in-process context (a branching list of model messages) and its marks.

A context shares its prefix with the one it was extended from, so a backtrack retargets it in
O(1) without copying a message.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, overload

from alpstore.errors import UsageError
from alpstore.sessions import (
    CheckpointInfo,
    Entry,
)
from alpstore.views import View

if TYPE_CHECKING:
    pass

MAX_CONTEXT_DEPTH: Final = 48
"""A context whose chain of branches would be deeper is flattened (one pointer copy), so
reading one never walks more than this many segments."""


# ---------------------------------------------------------------------- in-process context
class _Segment:
    """Entries appended after a branch point: positions ``base`` … ``base + len(items) - 1``."""

    __slots__ = ("base", "depth", "items", "parent")

    def __init__(self, parent: _Segment | None, base: int, items: list[Any]) -> None:
        self.parent = parent
        self.base = base
        self.items = items
        self.depth: int = parent.depth + 1 if parent is not None else 1


class Context(Sequence[Any]):
    """The message list of a covering head, held in process: immutable, structurally shared.

    The first ``len(self)`` entries of a chain of segments (the piece table of ``views.py``,
    in memory). Taking a prefix is O(1); extending at the tip grows the shared segment in place
    (every other context sees only its own prefix of it); extending anywhere else branches. The
    messages themselves are shared between contexts and with the caller: treat them as
    read-only.
    """

    __slots__ = ("_length", "_seg")

    def __init__(self, seg: _Segment | None = None, length: int = 0) -> None:
        self._seg = seg
        self._length = length

    @classmethod
    def of(cls, values: Sequence[Any]) -> Context:
        """A context holding ``values`` (the list is copied, not the messages)."""
        return cls(_Segment(None, 0, list(values)), len(values)) if values else cls()

    def __len__(self) -> int:
        return self._length

    def _ranges(self) -> list[tuple[list[Any], int]]:
        out: list[tuple[list[Any], int]] = []
        seg, hi = self._seg, self._length
        while seg is not None and hi > 0:
            lo = min(seg.base, hi)
            if hi > lo:
                out.append((seg.items, hi - lo))
            seg, hi = seg.parent, lo
        out.reverse()
        return out

    def __iter__(self) -> Iterator[Any]:
        for items, count in self._ranges():
            yield from itertools.islice(items, count)

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return self.to_list()[index]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("context index out of range")
        seg = self._seg
        while seg is not None and index < seg.base:
            seg = seg.parent
        assert seg is not None
        return seg.items[index - seg.base]

    def to_list(self) -> list[Any]:
        """A plain list of the messages (pointers copied, messages shared)."""
        return list(self)

    def prefix(self, length: int) -> Context:
        """The first ``length`` entries, in O(1)."""
        if not 0 <= length <= self._length:
            raise UsageError(f"context prefix {length}: the context holds {self._length} entries")
        return Context(self._seg, length)

    def extend(self, values: Sequence[Any]) -> Context:
        """This context with ``values`` appended (O(len(values)) unless it must flatten)."""
        if not values:
            return self
        seg = self._seg
        if seg is not None and self._length == seg.base + len(seg.items):
            seg.items.extend(values)
            return Context(seg, self._length + len(values))
        if seg is None or self._length == 0:
            return Context.of(values)
        if seg.depth >= MAX_CONTEXT_DEPTH:
            return Context.of([*self, *values])
        return Context(_Segment(seg, self._length, list(values)), self._length + len(values))


def model_message(entry: Entry) -> Any:
    """What a model call sees for a covering-list entry: the message, or a summary as a
    system message.
    """
    if entry.kind == "summary":
        return {"role": "system", "content": entry.value.get("summary", "")}
    return entry.value


# ---------------------------------------------------------------------- marks and backtracks
@dataclass(frozen=True)
class Mark:
    """A checkpoint a live session can backtrack to.

    Fields:
        checkpoint: its archive row, or None for an in-process checkpoint (storage memory).
        view: the archive view of the head at that point.
        turn: the session's turn then.
        label: the checkpoint's label.
        trigger: what caused it (every_turn, after_tool_call, manual …).
        context: the in-process context then, or None when not hydrated.
        file: the deep file written for it, if any.
        floor_seq: the sequence number of the newest archive checkpoint at or before it (what
            a backtrack to it keeps retained in the archive).
        cover: the covering digest of ``view`` when known (an in-process checkpoint keeps it,
            so a backtrack to it does not recompute it from every entry).
    """

    checkpoint: CheckpointInfo | None
    view: View
    turn: int
    label: str
    trigger: str | None
    context: Context | None = None
    file: Path | None = None
    floor_seq: int | None = None
    cover: int | None = None

    @property
    def in_memory(self) -> bool:
        """True for a checkpoint that lives only in this process."""
        return self.checkpoint is None


@dataclass(frozen=True)
class LiveBacktrack:
    """What :meth:`LiveSession.backtrack` did (in process; persisted at the next write).

    Fields:
        steps: how many checkpoints it rewound.
        target: the checkpoint it returned to.
        context: the context now in hand (the target's plus the steering message).
        steering: the steering text, or None.
    """

    steps: int
    target: Mark
    context: Context
    steering: str | None
