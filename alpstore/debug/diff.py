"""``debug diff``: what entries two checkpoints do not share, which of them a fold replaced, and
a structural diff of their kernel and working-memory documents.

The two checkpoints may belong to any sessions of the same archive. Only the parts of the two
covering lists that are not structurally shared are read, and only the differing entries are
hydrated, so comparing two long heads that share most of their history stays cheap.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from alpstore.codec import Digest
from alpstore.debug.entries import blob_ids_for, load_entries
from alpstore.debug.history import view_delta
from alpstore.errors import NotFoundError, UsageError
from alpstore.sessions import CheckpointInfo, Entry

if TYPE_CHECKING:
    from alpstore.core.store import CoreStore as Store

HYDRATE_BATCH = 500
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class JsonChange:
    """One difference between two JSON documents, at a JSONPath-like ``path``."""

    op: Literal["added", "removed", "changed"]
    path: str
    old: Any = None
    new: Any = None


@dataclass(frozen=True)
class Fold:
    """A summary present in B that replaced entries present in A."""

    position: int
    summary: Entry
    replaced: list[tuple[int, Entry]]


@dataclass(frozen=True)
class DiffResult:
    """Everything ``debug diff A B`` reports; positions are indexes in A (removed, replaced)
    or in B (added, summaries).
    """

    a: CheckpointInfo
    b: CheckpointInfo
    common: int
    removed: list[tuple[int, Entry]]
    added: list[tuple[int, Entry]]
    folds: list[Fold]
    kernel: list[JsonChange]
    working_memory: list[JsonChange]

    @property
    def identical(self) -> bool:
        """True when nothing differs."""
        return not (self.removed or self.added or self.folds or self.kernel or self.working_memory)


def json_diff(a: Any, b: Any, path: str = "$") -> list[JsonChange]:
    """Structural differences from ``a`` to ``b``: objects by key, arrays by index."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[JsonChange] = []
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if _IDENT.match(str(key)) else f'{path}["{key}"]'
            if key not in b:
                out.append(JsonChange("removed", sub, old=a[key]))
            elif key not in a:
                out.append(JsonChange("added", sub, new=b[key]))
            else:
                out.extend(json_diff(a[key], b[key], sub))
        return out
    if isinstance(a, list) and isinstance(b, list):
        out = []
        for i in range(max(len(a), len(b))):
            sub = f"{path}[{i}]"
            if i >= len(b):
                out.append(JsonChange("removed", sub, old=a[i]))
            elif i >= len(a):
                out.append(JsonChange("added", sub, new=b[i]))
            else:
                out.extend(json_diff(a[i], b[i], sub))
        return out
    if type(a) is not type(b) or a != b:
        if a is None:
            return [JsonChange("added", path, new=b)]
        if b is None:
            return [JsonChange("removed", path, old=a)]
        return [JsonChange("changed", path, old=a, new=b)]
    return []


def _resolve(store: Store, ref: str) -> CheckpointInfo:
    try:
        return store.resolve_checkpoint(ref)
    except NotFoundError:
        if not ("/" in ref or "\\" in ref or ref.endswith(".json") or Path(ref).exists()):
            raise
        raise UsageError(
            f"{ref!r} is a path: debug diff compares two checkpoints of the same archive "
            "(the one --root names), not checkpoints of two archives",
            hint="import the other checkpoint first (`alpstore checkpoint import FILE`), "
            "then diff SESSION@TURN references",
        ) from None


def _covered(store: Store, summary: Entry, depth: int = 8) -> set[bytes]:
    """Digests a summary covers, through nested summaries (bounded depth)."""
    seen: set[bytes] = set(summary.covers)
    frontier = list(summary.covers)
    for _ in range(depth):
        ids = blob_ids_for(store, [Digest(d) for d in frontier])
        nested = [e for e in load_entries(store, ids.values()).values() if e.kind == "summary"]
        frontier = [d for e in nested for d in e.covers if d not in seen]
        if not frontier:
            break
        seen.update(frontier)
    return seen


def diff(
    store: Store, ref_a: str, ref_b: str, *, progress: Callable[[int, int], None] | None = None
) -> DiffResult:
    """Compare checkpoint ``ref_a`` with checkpoint ``ref_b`` (ids, SESSION@TURN, @latest).

    Raises:
        UsageError: a reference names a file or another archive.
        NotFoundError: an unknown session, turn or checkpoint.
    """
    if ref_b.startswith("@") and "@" in ref_a and not ref_a.startswith("@"):
        ref_b = ref_a.split("@", 1)[0] + ref_b  # a bare @latest / @TURN: A's session
    if ref_a.startswith("@") and "@" in ref_b and not ref_b.startswith("@"):
        ref_a = ref_b.split("@", 1)[0] + ref_a
    a, b = _resolve(store, ref_a), _resolve(store, ref_b)
    d = view_delta(store, a.view, b.view)
    wanted = [i for _, i in d.removed] + [i for _, i in d.added]
    loaded: dict[int, Entry] = {}
    for start in range(0, len(wanted), HYDRATE_BATCH):
        loaded.update(load_entries(store, wanted[start : start + HYDRATE_BATCH]))
        if progress is not None:
            progress(min(start + HYDRATE_BATCH, len(wanted)), len(wanted))
    removed = [(p, loaded[i]) for p, i in d.removed]
    added = [(p, loaded[i]) for p, i in d.added]
    folds: list[Fold] = []
    taken: set[int] = set()
    for pos, entry in added:
        if entry.kind != "summary":
            continue
        covered = _covered(store, entry)
        replaced = [(p, e) for p, e in removed if p not in taken and e.digest in covered]
        taken.update(p for p, _ in replaced)
        folds.append(Fold(pos, entry, replaced))
    summaries = {f.position for f in folds}
    ka, wa = store.checkpoint_state(a)
    kb, wb = store.checkpoint_state(b)
    return DiffResult(
        a,
        b,
        d.common,
        [(p, e) for p, e in removed if p not in taken],
        [(p, e) for p, e in added if p not in summaries],
        folds,
        json_diff(ka, kb, "$"),
        json_diff(wa, wb, "$"),
    )
