"""Portable checkpoints: mas-lab files v1/v2, deep export/import, secret scan, stores, cadence."""

from __future__ import annotations

from alpstore.portable.files import (
    MAX_CHECKPOINT_BYTES,
    checkpoint_file_name,
    load_checkpoint_file,
    manifest_hash,
    validate_document,
    write_checkpoint_file,
)
from alpstore.portable.secrets import Finding, scan

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
