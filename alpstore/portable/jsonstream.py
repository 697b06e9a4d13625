"""Read a large JSON document incrementally: its structure by hand, each value with ``json``.

A deep file is one JSON object whose bulk is two arrays of messages. :class:`JsonStream` walks
the containers on the way to those arrays itself and hands every other value — each message,
the kernel, the manifest — to the C decoder (``raw_decode``) whole, so memory holds one message
at a time plus a read buffer, and parsing runs at ``json`` speed. Input is read in chunks from
any binary ``read`` (a file, a zstd stream reader), decoded as UTF-8 incrementally, and bounded
in total and per value.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable, Iterator
from typing import Any, Final

from alpstore.codec import strict_decoder
from alpstore.errors import CheckpointFileError

CHUNK: Final = 1024 * 1024
"""Bytes read at a time."""

_WS: Final = re.compile(r"[ \t\n\r]*")
_BLANKS: Final = " \t\n\r"
_NUMBER_TAIL: Final = re.compile(r"[0-9.eE+-]*")
"""What may follow a number's parsed part and still belong to it: when nothing else follows
before the end of the buffer, the number may go on in the next chunk."""


_DECODER: Final = strict_decoder()
"""Refuses NaN/Infinity and a repeated key (``alpstore.codec``'s one JSON reader)."""


class JsonStream:
    """A cursor over JSON text read incrementally.

    Args:
        read: returns up to ``n`` bytes, ``b""`` at the end.
        where: the file, for error messages.
        limit: most bytes read in total (a decompression bomb stops here).
        value_limit: most characters one value may span (one message, the kernel …).
    """

    def __init__(
        self, read: Callable[[int], bytes], *, where: str, limit: int, value_limit: int
    ) -> None:
        self._read = read
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self.where = where
        self.limit = limit
        self.value_limit = value_limit
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.consumed = 0  # characters dropped from the front of buf
        self.bytes_read = 0
        self.last_span = (0, 0)
        """``(start, end)`` in ``buf`` of the value :meth:`value` returned last."""

    # ---------------------------------------------------------------- input
    def _more(self, at_least: int = 0) -> bool:
        """Read at least ``at_least`` more bytes (or to the end); False when nothing came."""
        if self.eof:
            return False
        if self.pos:
            self.consumed += self.pos
            self.buf = self.buf[self.pos :]
            self.pos = 0
        want = max(CHUNK, at_least)
        got: list[str] = []
        total = 0
        while total < want or not any(got):  # a few bytes may end inside one character
            data = self._read(max(4, min(want - total, 16 * CHUNK)))
            if not data:
                try:
                    got.append(self._utf8.decode(b"", final=True))
                except UnicodeDecodeError as err:
                    raise self.error(f"not UTF-8 text ({err.reason})") from None
                self.eof = True
                break
            total += len(data)
            self.bytes_read += len(data)
            if self.bytes_read > self.limit:
                raise CheckpointFileError(
                    f"{self.where}: more than {self.limit} bytes (decompressed); refused",
                    hint="deep files are limited to the same size on export and on import",
                )
            try:
                got.append(self._utf8.decode(data))
            except UnicodeDecodeError as err:
                raise self.error(f"not UTF-8 text ({err.reason})") from None
        if not any(got):
            return False
        self.buf = "".join([self.buf, *got])  # one copy, however large the value
        return True

    def error(self, reason: str, at: int | None = None) -> CheckpointFileError:
        """A one-line error naming the file and the character offset."""
        offset = self.consumed + (self.pos if at is None else at)
        return CheckpointFileError(f"{self.where}: not valid JSON ({reason} at character {offset})")

    def peek(self) -> str:
        """The next non-blank character ('' at the end), not consumed."""
        pos = self.pos
        if pos < len(self.buf) and (ch := self.buf[pos]) not in _BLANKS:
            return ch  # compact JSON (what export writes): nothing to skip
        while True:
            m = _WS.match(self.buf, self.pos)
            assert m is not None
            self.pos = m.end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._more():
                return ""

    def expect(self, ch: str) -> None:
        """Consume ``ch`` (after blanks).

        Raises:
            CheckpointFileError: something else comes next.
        """
        got = self.peek()
        if got != ch:
            raise self.error(f"expected {ch!r}, found {got!r}" if got else f"expected {ch!r}")
        self.pos += 1

    def value(self) -> Any:
        """Parse the next value whole; :attr:`last_span` says where its text was.

        Raises:
            CheckpointFileError: invalid JSON, nested too deeply, or a value longer than
                ``value_limit`` characters.
        """
        first = self.peek()
        if not first:
            raise self.error("unexpected end of input")
        while True:
            start = self.pos
            try:
                obj, end = _DECODER.raw_decode(self.buf, start)
            except json.JSONDecodeError as err:
                if self._incomplete(err):
                    self._grow(start)
                    continue
                raise self.error(err.msg, err.pos) from None
            except RecursionError:
                raise self.error("nested too deeply") from None
            except ValueError as err:  # NaN/Infinity, a repeated key, an integer of > 4,300 digits
                raise self.error(str(err).splitlines()[0]) from None
            if not self.eof and first not in '"[{' and _NUMBER_TAIL.fullmatch(self.buf, end):
                self._grow(start)  # a number or literal may go on in the next chunk ("12.|5")
                continue
            if end - start > self.value_limit:
                self._grow(start, force=True)
            self.last_span = (start, end)
            self.pos = end
            return obj

    def _incomplete(self, err: json.JSONDecodeError) -> bool:
        """True when the error may only mean the value goes on past the buffer."""
        if self.eof:
            return False
        return err.msg.startswith("Unterminated string") or err.pos >= len(self.buf) - 8

    def _grow(self, start: int, *, force: bool = False) -> None:
        pending = len(self.buf) - start
        if force or pending > self.value_limit:
            raise CheckpointFileError(
                f"{self.where}: a value at character {self.consumed + start} is longer than "
                f"{self.value_limit} characters; refused"
            )
        if not self._more(max(CHUNK, pending)):
            self.eof = True

    def string(self) -> str:
        """The next value, which must be a string (an object's key)."""
        if self.peek() != '"':
            raise self.error("expected a string key")
        key = self.value()
        assert isinstance(key, str)
        return key

    def members(self) -> Iterator[str]:
        """An object's keys, each after its ``:``; the caller consumes each value."""
        self.expect("{")
        if self.peek() == "}":
            self.pos += 1
            return
        seen: set[str] = set()
        while True:
            key = self.string()
            if key in seen:
                raise self.error(f"duplicate key {ascii(key)[:40]}")
            seen.add(key)
            self.expect(":")
            yield key
            nxt = self.peek()
            self.pos += 1
            if nxt == "}":
                return
            if nxt != ",":
                raise self.error("expected ',' or '}'", self.pos - 1)

    def elements(self) -> Iterator[int]:
        """An array's indices; the caller consumes each element."""
        self.expect("[")
        if self.peek() == "]":
            self.pos += 1
            return
        index = 0
        while True:
            yield index
            index += 1
            nxt = self.peek()
            self.pos += 1
            if nxt == "]":
                return
            if nxt != ",":
                raise self.error("expected ',' or ']'", self.pos - 1)

    def end(self) -> None:
        """Nothing but blanks may follow the document.

        Raises:
            CheckpointFileError: extra data.
        """
        if self.peek():
            raise self.error("extra data after the document")

    def release(self) -> None:
        """Drop the consumed part of the buffer (after a large value)."""
        if self.pos > CHUNK:
            self.consumed += self.pos
            self.buf = self.buf[self.pos :]
            self.pos = 0
