"""``continuity.md``: the checkpoint rendered for reinjection after a compaction (CT-7, CT-8).

Sections in a fixed order, empty ones omitted, and nothing but the execution id, the objective and
the pin texts in the output. Over the 24 KiB budget the least load-bearing entries go first:
next actions, open items, the objective (whole), constraints, decisions — oldest entry first,
one at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from alpstore.continuity.checkpoint import SECTIONS, Checkpoint, Pin
from alpstore.continuity.pins import clean_objective, collapse_control

MAX_RENDER_BYTES = 24 * 1024
"""The rendered injection's budget in UTF-8 bytes (CT-4)."""

OBJECTIVE = "objective"
TITLES = {
    OBJECTIVE: "Objective",
    "decisions": "Decisions",
    "constraints": "Constraints",
    "openItems": "Open items",
    "nextActions": "Next actions",
}
"""Section headings, in the order they are rendered."""
CUT_ORDER = ("nextActions", "openItems", OBJECTIVE, "constraints", "decisions")
"""Which section loses entries first when the render is over budget (least load-bearing first)."""


@dataclass(frozen=True)
class Rendering:
    """A rendered ``continuity.md`` and what the budget cost.

    Attributes:
        text: the Markdown, at most the budget in UTF-8 bytes.
        full_bytes: the size the render would have had with nothing cut.
        dropped: entries cut per section (``objective`` counts 1 when it was dropped).
    """

    text: str
    full_bytes: int
    dropped: dict[str, int] = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        """True when there is no section to inject (no objective, no pin)."""
        return "\n## " not in self.text


def _header(execution_id: str) -> str:
    return f"# Continuity of {execution_id}\n"


def _heading(section: str) -> str:
    return f"\n## {TITLES[section]}\n\n"


def _item(section: str, text: str) -> str:
    return f"{text}\n" if section == OBJECTIVE else f"- {text}\n"


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def render(checkpoint: Checkpoint, *, limit: int = MAX_RENDER_BYTES) -> Rendering:
    """Render ``checkpoint`` as Markdown within ``limit`` bytes (cutting per CT-8)."""
    entries: dict[str, list[tuple[str, str]]] = {name: [] for name in TITLES}
    objective = clean_objective(checkpoint.objective)
    if objective is not None:
        entries[OBJECTIVE].append(("", objective))
    for name in SECTIONS:
        entries[name] = [
            (pin.created_at, text) for pin in checkpoint.pins(name) if (text := _text(pin))
        ]

    header = _header(checkpoint.execution_id)
    item_sizes = {
        name: [_size(_item(name, text)) for _, text in items] for name, items in entries.items()
    }
    section_sizes = {
        name: (_size(_heading(name)) + sum(sizes)) if sizes else 0
        for name, sizes in item_sizes.items()
    }
    total = _size(header) + sum(section_sizes.values())
    full = total
    dropped: dict[str, int] = {}
    for name in CUT_ORDER:
        # Oldest first: by createdAt, ties broken by position in the list.
        stamps = [stamp for stamp, _ in entries[name]]
        order = sorted(range(len(stamps)), key=lambda i: (stamps[i], i))
        gone: set[int] = set()
        for index in order:
            if total <= limit:
                break
            gone.add(index)
            total -= item_sizes[name][index]
            if len(gone) == len(entries[name]):
                total -= _size(_heading(name))
        if gone:
            dropped[name] = len(gone)
            entries[name] = [e for i, e in enumerate(entries[name]) if i not in gone]
    parts = [header]
    for name, items in entries.items():
        if items:
            parts.append(_heading(name))
            parts.extend(_item(name, text) for _, text in items)
    text = "".join(parts)
    return Rendering(text=text, full_bytes=full, dropped=dropped)


def _text(pin: Pin) -> str:
    """A pin's text as it may appear in the injection: one line, no control characters."""
    return collapse_control(pin.text)
