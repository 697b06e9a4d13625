r"""Text from files on its way to a terminal: control characters made visible, never obeyed.

Session ids, names, labels and message content come from files other people wrote. Printed
raw, an ESC starts a control sequence (OSC 52 writes the clipboard, CSI clears the screen), a
carriage return or newline forges table rows, and a bidirectional override reorders what the
reader sees. :func:`term` spells every such character as a visible escape (``\x1b``,
``\u202e``); ordinary text, including non-ASCII letters, passes unchanged. JSON printed to a
terminal goes through :func:`json_text` instead: the same characters as JSON escapes, so the
output is still the same JSON document (piped, it is left byte for byte as written).
"""

from __future__ import annotations

import re
from typing import Final

_BIDI: Final = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
"""Bidirectional marks, embeddings, overrides and isolates (Trojan Source)."""

_UNSAFE: Final = re.compile(
    "[\x00-\x1f\x7f-\x9f" + _BIDI + "\u2028\u2029\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]"
)
"""C0 and C1 controls, DEL, bidi controls, line/paragraph separators, BOM, interlinear
annotations and tag characters: everything a terminal may act on or a reader may not see."""


_UNSAFE_BUT_NEWLINE: Final = re.compile(_UNSAFE.pattern.replace("\x00-\x1f", "\x00-\x09\x0b-\x1f"))


def term_lines(lines: list[str]) -> str:
    """Each of ``lines`` as :func:`term` makes it, each ending in a newline: one text, one
    scan when no line needs an escape (a 6,000-line history).
    """
    text = "".join(f"{line}\n" for line in lines)
    if text.count("\n") == len(lines) and _UNSAFE_BUT_NEWLINE.search(text) is None:
        return text
    return "".join(f"{term(line)}\n" for line in lines)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def term(text: object, *, keep: str = "") -> str:
    r"""``text`` safe to print on a terminal: every control character shown as an escape, but
    those in ``keep`` (a multi-line table cell keeps ``"\t\n"``).
    """
    s = text if isinstance(text, str) else str(text)
    if keep:
        return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escape(m), s)
    return _UNSAFE.sub(_escape, s)


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # a UTF-16 surrogate pair, as JSON spells characters beyond the BMP
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def json_text(text: str) -> str:
    r"""JSON text safe to print on a terminal: every character :func:`term` would escape, but
    newlines and tabs (JSON's own whitespace), spelled as a JSON ``\u`` escape (four hex
    digits). Outside strings JSON holds no such character, so the result parses to the same
    document.
    """
    return _UNSAFE.sub(lambda m: m.group() if m.group() in "\t\n" else _json_escape(m), text)
