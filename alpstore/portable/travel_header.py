"""Opening a session file (plain or ``.zst``) and telling one by its first line, on the standard
library and zstandard alone: `session import` asks :func:`header_of` of every file it is given,
and a transcript's import then never loads the session-file reader (``travel``: schemas, the
secret scanner's patterns, PyYAML; about 50 ms of imports, issue 41).
"""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final

import zstandard

from alpstore.errors import CheckpointFileError, NotFoundError

FORMAT: Final = "alpstore.session"
"""The ``format`` of a session file's header line."""
ZST_SUFFIX: Final = ".zst"
"""The name ending of a zstd-compressed file."""


def is_compressed(path: Path) -> bool:
    """True for a ``.zst`` file name."""
    return path.name.endswith(ZST_SUFFIX)


def open_lines(path: Path) -> tuple[IO[bytes], Callable[[int], bytes]]:
    """The open file and its ``read`` (decompressing a ``.zst`` file, across its frames).

    Raises:
        NotFoundError: no such file.
        CheckpointFileError: not a regular file, or it cannot be read.
    """
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise CheckpointFileError(f"{path}: not a regular file")
        handle: IO[bytes] = path.open("rb")
    except FileNotFoundError:
        raise NotFoundError(f"{path}: no such file") from None
    except OSError as exc:
        raise CheckpointFileError(f"{path}: cannot read ({exc.strerror})") from exc
    if is_compressed(path):
        reader: Any = zstandard.ZstdDecompressor().stream_reader(handle, read_across_frames=True)
        return handle, reader.read
    return handle, handle.read


def header_of(path: Path) -> dict[str, Any] | None:
    """The first line of ``path`` when it is a session file's header (any version), else None
    (the file is something else: a transcript, a history).
    """
    try:
        handle, read = open_lines(path)
    except CheckpointFileError:
        return None
    with handle:
        try:
            head = read(4096)
        except (OSError, zstandard.ZstdError):
            return None
    first = head.removeprefix(b"\xef\xbb\xbf").split(b"\n", 1)[0]
    try:
        doc = json.loads(first)
    except ValueError:
        return None
    if isinstance(doc, dict) and doc.get("format") == FORMAT:
        return doc
    return None
