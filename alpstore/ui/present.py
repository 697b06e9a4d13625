"""Turning stored documents into what a page shows: roles, text, tool calls, text diffs, a
chart. Every string here is still untrusted; the templates escape it (Jinja2 autoescape), and
:func:`visible` makes control characters (ANSI escapes, bidi overrides) show as text.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from alpstore.rules.messages import TOO_DEEP, shown
from alpstore.sessions import Entry

LONG_TEXT = 1200
"""Characters above which a message body is collapsed behind its first lines."""
PREVIEW = 300
MAX_DIFF_LINES = 400
MAX_DIFF_INPUT = 1_000
"""Lines of each side a row's diff compares once the common start and end are set aside:
difflib's matcher takes quadratic time (two 20,000-line tool outputs took 17 s)."""
DIFF_CONTEXT = 2
_HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@$")

_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f"  # C0 (but tab and newline), DEL, C1
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidi marks, overrides, isolates
    "\u180e\u200b-\u200d\u2060-\u2064\ufeff"  # zero-width spaces, joiners, invisible operators
    "\u2028\u2029\ufff9-\ufffb"  # line/paragraph separators, interlinear annotations
    "\U000e0000-\U000e007f]"  # tag characters: invisible text a model still reads
)
"""Every character :func:`alpstore.cli._terminal.term` escapes, and the zero-width ones."""


def visible(text: Any) -> str:
    r"""``text`` with control, bidi, zero-width and tag characters written as escapes
    (``\x1b``, ``\u202e``, ``\U000e0041``): an ANSI escape shows as text, never colours or
    hides anything, and no text is reordered or hidden.
    """
    s = text if isinstance(text, str) else str(text)

    def esc(m: re.Match[str]) -> str:
        c = ord(m.group())
        if c < 0x100:
            return f"\\x{c:02x}"
        return f"\\u{c:04x}" if c <= 0xFFFF else f"\\U{c:08x}"

    return _INVISIBLE.sub(esc, s)


@dataclass(frozen=True)
class ToolCall:
    """A tool call of an assistant message."""

    name: str
    arguments: str
    id: str


@dataclass
class Message:
    """An entry as the conversation page shows it."""

    kind: str
    role: str
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    covers: int = 0
    digest: str = ""

    @property
    def long(self) -> bool:
        """True when the body is collapsed by default."""
        return len(self.text) > LONG_TEXT

    @property
    def preview(self) -> str:
        """The first characters of a long body."""
        return self.text[:PREVIEW]


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        return value
    # the store takes JSON as deep as its writer's stack allowed; a page renders it from a
    # deeper stack, and the indenting encoder (pure Python) may run out there
    try:
        return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)
    except RecursionError:
        return TOO_DEEP


def _arguments(raw: Any) -> str:
    if isinstance(raw, str):
        # a model's text, not stored JSON: it may nest deeper than the parser recurses
        try:
            return json.dumps(json.loads(raw), ensure_ascii=False, indent=2, sort_keys=True)
        except (ValueError, RecursionError):
            return raw
    return _pretty(raw)


def message(entry: Entry) -> Message:
    """Role, body and tool calls of a message (OpenAI chat, Claude Code or any JSON), or a
    summary's text and how many entries it covers.
    """
    if entry.kind == "summary":
        value = entry.value if isinstance(entry.value, dict) else {}
        return Message(
            "summary",
            "summary",
            _pretty(value.get("summary", "")),
            covers=len(entry.covers),
            digest=entry.hex,
        )
    if isinstance(entry.value, dict) and isinstance(entry.value.get("content"), str | None):
        v = entry.value  # text as stored (JSON text pretty-printed), tool calls apart
        text = "" if v.get("content") is None else _pretty(v["content"])
    else:
        text = ""
    s = shown(entry.value)
    calls = [ToolCall(c.name, _arguments(c.arguments), c.id) for c in s.calls]
    return Message("message", s.role, text or s.text, calls, s.tool_call_id, digest=entry.hex)


def _lines(text: str) -> list[str]:
    r"""``text``'s lines, ended by newlines only: ``str.splitlines`` also breaks at ``\x0b``,
    ``\x1c``, ``\x85``, ``\u2028``…, which would then vanish instead of showing as escapes.
    """
    return text.removesuffix("\n").split("\n") if text else []


def text_diff(old: Entry, new: Entry) -> list[tuple[str, str]]:
    """A line diff of two entries' bodies: ``(tag, line)`` with tag ``' '``, ``'-'``, ``'+'``
    (long unchanged runs shortened). Lines both share at the start and at the end are set
    aside before difflib compares what is between (hunk headers keep the bodies' own line
    numbers); of that, at most :data:`MAX_DIFF_INPUT` lines a side are compared, and a last
    ``'@'`` line says so.
    """
    a, b = message(old), message(new)
    left = [f"role: {a.role}", *_lines(a.text)]
    left += [f"call {c.name} {c.arguments}" for c in a.tool_calls]
    right = [f"role: {b.role}", *_lines(b.text)]
    right += [f"call {c.name} {c.arguments}" for c in b.tool_calls]
    shortest = min(len(left), len(right))
    head = 0
    while head < shortest and left[head] == right[head]:
        head += 1
    tail = 0
    while tail < shortest - head and left[-1 - tail] == right[-1 - tail]:
        tail += 1
    start = max(head - DIFF_CONTEXT, 0)
    stop = max(tail - DIFF_CONTEXT, 0)
    mid_left, mid_right = left[start : len(left) - stop], right[start : len(right) - stop]
    cut = max(len(mid_left), len(mid_right)) > MAX_DIFF_INPUT
    out: list[tuple[str, str]] = []
    for line in difflib.unified_diff(
        mid_left[:MAX_DIFF_INPUT], mid_right[:MAX_DIFF_INPUT], lineterm="", n=DIFF_CONTEXT
    ):
        if line.startswith(("---", "+++")):
            continue
        tag = line[:1] if line[:1] in "+-@" else " "
        out.append((tag, line[1:] if tag != "@" else _shifted(line, start)))
        if len(out) >= MAX_DIFF_LINES:
            out.append(("@", "… (diff cut)"))
            return out
    if cut:
        out.append(
            (
                "@",
                f"… (compared {MAX_DIFF_INPUT:,} of the {len(mid_left):,} and "
                f"{len(mid_right):,} lines that differ from line {start + 1:,} on)",
            )
        )
    return out


def _shifted(hunk: str, offset: int) -> str:
    """A unified-diff hunk header with ``offset`` added to both start lines."""
    m = _HUNK.match(hunk)
    if m is None or not offset:
        return hunk
    a, b = int(m.group(1)) + offset, int(m.group(3)) + offset
    return f"@@ -{a}{m.group(2) or ''} +{b}{m.group(4) or ''} @@"


def when(ts: float) -> str:
    """A UTC timestamp, to the second (one no calendar date has, as a number)."""
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, ValueError, OSError):  # a damaged or foreign archive's clock
        return f"{ts:g} (not a date)"


def size(n: int) -> str:
    """Bytes in a short human form."""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"  # pragma: no cover


@dataclass(frozen=True)
class Bar:
    """One bar of the bytes-per-checkpoint chart (SVG user units)."""

    x: float
    y: float
    width: float
    height: float
    title: str


CHART_W = 600
CHART_H = 80
MAX_BAR = 12.0


def bytes_chart(points: list[tuple[int, int, int]]) -> list[Bar]:
    """Bars for ``(checkpoint id, turn, bytes added)``, scaled to the chart's box."""
    if not points:
        return []
    top = max(b for _, _, b in points) or 1
    width = min(CHART_W / len(points), MAX_BAR)
    bars = []
    for n, (ck, turn, added) in enumerate(points):
        h = max(CHART_H * added / top, 1.0 if added else 0.0)
        bars.append(
            Bar(
                round(n * width, 2),
                round(CHART_H - h, 2),
                round(max(width - 1, 0.5), 2),
                round(h, 2),
                f"turn {turn}, checkpoint {ck}: +{size(added)}",
            )
        )
    return bars
