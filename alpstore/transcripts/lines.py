"""The records of a JSON Lines transcript from a byte offset on: a torn last line (the writer
is still writing it) is left for the next read; a malformed line is refused, or skipped and
named when the caller asks for that.
"""

from __future__ import annotations

import math
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alpstore.codec import (
    MAX_DEPTH,
    DuplicateKeyError,
    brackets,
    canonical_json,
    nesting_depth,
    strict_decoder,
)
from alpstore.errors import AlpstoreError, InputError

MAX_TRANSCRIPT_BYTES = 1024 * 1024 * 1024
"""A transcript larger than 1 GiB is refused before reading."""
MAX_LINE_BYTES = 2 * 256 * 1024 * 1024
"""Longest line: one record, bounded as a deep file bounds one value."""

_DECODER = strict_decoder(constants=True)
_SURROGATE = re.compile("[\ud800-\udfff]")
"""A surrogate code point: in a parsed string it is a lone one (UTF-8 cannot hold it)."""


def _canonical(obj: Any) -> bool:
    """Whether a parsed record is canonical JSON as stored (every float finite, no string with
    a lone surrogate), walked without encoding it: a record of megabytes is not copied three
    times over (encoder chunks, their join, the UTF-8 bytes) only to be checked.
    """
    stack: list[Any] = [obj]
    search = _SURROGATE.search
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is str:
            if not item.isascii() and search(item):
                return False
        elif kind is dict:
            for key, value in item.items():
                if not key.isascii() and search(key):
                    return False
                stack.append(value)
        elif kind is list:
            stack.extend(item)
        elif kind is float and not math.isfinite(item):
            return False
    return True


@dataclass
class Cursor:
    """Where a read of a file stands.

    Fields:
        offset: bytes consumed (every complete line before it, blank or not).
        lines: lines consumed (the next line's number is ``lines + 1``).
        bad: numbers of the malformed lines skipped by this read.
        torn: a last line without its newline that does not parse yet was left unread.
    """

    offset: int = 0
    lines: int = 0
    bad: list[int] = field(default_factory=list)
    torn: bool = False


def file_size(path: Path) -> int:
    """The size of a regular file.

    Raises:
        InputError: missing, unreadable, not a regular file (a FIFO would block), or over
            :data:`MAX_TRANSCRIPT_BYTES`.
    """
    try:
        info = path.stat()
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from err
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path}: not a regular file")
    if info.st_size > MAX_TRANSCRIPT_BYTES:
        raise InputError(
            f"{path}: {info.st_size} bytes is over the {MAX_TRANSCRIPT_BYTES}-byte import limit"
        )
    return info.st_size


def parse_record(box: list[bytes], where: str) -> dict[str, Any]:
    """One line (the only item of ``box``, taken from it: a long record is not held twice
    over) as a JSON object, checked as the archive will hold it.

    Raises:
        InputError: not UTF-8, not JSON, a repeated key, not an object, nested too deeply or
            holding what canonical JSON cannot (NaN, a lone surrogate); naming ``where``.
    """
    raw = box.pop()
    deep = brackets(raw) > MAX_DEPTH
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{where}: not UTF-8 text ({err.reason} at byte {err.start})") from err
    del raw
    try:  # (the decoder skips the whitespace around a document: no stripped copy)
        obj = _DECODER.decode(text.removeprefix("\ufeff"))
    except DuplicateKeyError as err:
        raise InputError(f"{where}: {err}; refused") from err
    except (ValueError, RecursionError) as err:
        reason = (
            "nested too deeply"
            if isinstance(err, RecursionError)
            else getattr(err, "msg", None) or str(err).split(";")[0]
        )
        raise InputError(f"{where}: not valid JSON ({reason})") from err
    del text
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if deep and nesting_depth(obj) > MAX_DEPTH:
        raise InputError(f"{where}: nested deeper than {MAX_DEPTH} levels; refused")
    if not _canonical(obj):
        try:
            canonical_json(obj)  # raises, naming the path
        except AlpstoreError as err:
            raise InputError(f"{where}: {err.message}") from err
    return obj


def _blank(raw: bytes) -> bool:
    return len(raw) < 256 and not raw.strip()


def read_records(
    path: Path, cursor: Cursor, *, skip_bad_lines: bool = False, size: int | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` for each complete line from ``cursor`` on, advancing it.

    Reads only the bytes after ``cursor.offset`` (an incremental import costs what was added,
    not the file). A last line without its newline is complete when it parses; otherwise it
    is torn (the writer is mid-line) and left for the next read (``cursor.torn``).

    Raises:
        InputError: a malformed line (unless ``skip_bad_lines``: then its number goes to
            ``cursor.bad``), or a line over :data:`MAX_LINE_BYTES`.
    """
    end = file_size(path) if size is None else size
    try:
        handle = path.open("rb")
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from err
    with handle:
        handle.seek(cursor.offset)
        while cursor.offset < end:
            raw = handle.readline(min(MAX_LINE_BYTES + 1, end - cursor.offset))
            if not raw:
                break
            number = cursor.lines + 1
            where = f"{path}:{number}"
            complete = raw.endswith(b"\n")
            if not complete and len(raw) > MAX_LINE_BYTES:
                raise InputError(f"{where}: a line longer than {MAX_LINE_BYTES} bytes; refused")
            size, blank = len(raw), _blank(raw)
            box = [raw]
            del raw
            if not complete:  # the end of what is written so far
                if blank:
                    break
                try:
                    record = parse_record(box, where)
                except InputError:
                    cursor.torn = True  # the writer is mid-line: the next read takes it
                    break
                cursor.offset += size
                cursor.lines = number
                yield number, record
                break
            cursor.offset += size
            cursor.lines = number
            if blank:
                continue
            try:
                record = parse_record(box, where)
            except InputError:
                if not skip_bad_lines:
                    raise
                cursor.bad.append(number)
                continue
            yield number, record
            del record
