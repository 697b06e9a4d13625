"""Checking a deep checkpoint document or file as an import would, with no archive.

Schema, manifest hash, ids, labels, integers, nesting, every digest and marker; nothing written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alpstore.errors import CheckpointFileError
from alpstore.portable.deep import check_covering_digest
from alpstore.portable.importing import Importer
from alpstore.portable.reading import (
    Header,
    check_header,
    feed_document,
    open_stream,
    stream_document,
)
from alpstore.views import cover_bytes


def check_document(doc: dict[str, Any], *, where: str) -> Header:
    """Everything :func:`import_document` checks that needs no archive (no write).

    Raises:
        CheckpointFileError: naming the JSON path.
    """
    if not isinstance(doc, dict):
        raise CheckpointFileError(f"{where}: a checkpoint file must hold a JSON object")
    imp = Importer(None, None, where)
    header_doc = feed_document(doc, imp)
    head = check_header(header_doc, where=where)
    imp.finish_messages(head.is_export)
    check_covering_digest(header_doc, cover_bytes(imp.cover), where)
    return head


def check_file(path: Path) -> tuple[Header, int, int]:
    """Stream-check a deep file with no archive: ``(header, entries, covered)``.

    Raises:
        NotFoundError, CheckpointFileError.
    """
    with open_stream(path) as js:
        imp = Importer(None, None, str(path), parsed=True)
        header_doc = stream_document(js, imp)
        head = check_header(header_doc, where=str(path))
        imp.finish_messages(head.is_export)
        check_covering_digest(header_doc, cover_bytes(imp.cover), str(path))
    return head, imp.entries, imp.covered


@dataclass(frozen=True)
class ImportPlan:
    """A deep document checked without an archive (see :func:`plan_import`).

    Fields:
        doc: the document.
        where: its name in messages.
        version, session_id, label, turn: from the checked header.
    """

    doc: dict[str, Any]
    where: str
    version: int
    session_id: str | None
    label: str | None
    turn: int


def plan_import(doc: dict[str, Any], *, where: str) -> ImportPlan:
    """Check a checkpoint document as an import would (schema, manifest hash, ids, labels,
    integers, nesting, every digest and marker), writing nothing.

    Raises:
        CheckpointFileError: anything wrong, naming the JSON path.
    """
    head = check_document(doc, where=where)
    return ImportPlan(doc, where, head.version, head.session_id, head.label, head.turn)
