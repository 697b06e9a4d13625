"""Portable checkpoints: mas-lab files v1/v2, deep export/import, stores, cadence.
May import alpstore.sessions, alpstore.core (typing) and below; never store, live, importers.

The names below are imported on first use (PEP 562): a command that needs only the secret scan
(``alpstore context pin``) does not pay for jsonschema, PyYAML and zstandard.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from alpstore.portable.files import (
        MAX_CHECKPOINT_BYTES,
        checkpoint_file_name,
        load_checkpoint_file,
        manifest_hash,
        validate_document,
        write_checkpoint_file,
    )
    from alpstore.rules.secrets import Finding, scan

_WHERE = {
    "MAX_CHECKPOINT_BYTES": "alpstore.portable.files",
    "checkpoint_file_name": "alpstore.portable.files",
    "load_checkpoint_file": "alpstore.portable.files",
    "manifest_hash": "alpstore.portable.files",
    "validate_document": "alpstore.portable.files",
    "write_checkpoint_file": "alpstore.portable.files",
    "Finding": "alpstore.rules.secrets",
    "scan": "alpstore.rules.secrets",
}

__all__ = [
    "MAX_CHECKPOINT_BYTES",
    "Finding",
    "checkpoint_file_name",
    "load_checkpoint_file",
    "manifest_hash",
    "scan",
    "validate_document",
    "write_checkpoint_file",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
