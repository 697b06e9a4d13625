"""Importing this module warms an interpreter up for torture workers (forkserver preload).

Workers are forked from a server that imported this module: it runs a few writes of every kind on
a throwaway run root first, so that lazily imported modules (Alembic, the SQLite dialect) and
compiled SQL are already in memory and a new worker opens its archive in milliseconds.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import alpstore.db.migrate  # noqa: F401  (imported lazily by Store.open otherwise)
from alpstore.testing.workload import warm_up

_dir = Path(tempfile.mkdtemp(prefix="alpstore-warm-"))
try:
    warm_up(_dir)
finally:
    shutil.rmtree(_dir, ignore_errors=True)
