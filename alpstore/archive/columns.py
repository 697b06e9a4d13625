"""Column lists of the archive's tables that several SQLAlchemy Core queries select.

Imports SQLAlchemy (through :mod:`alpstore.db.tables`): for writers and checks, never for the
plain-SQL read path.
"""

from __future__ import annotations

from alpstore.db.tables import zstd_dicts

DICT_ROW = (
    zstd_dicts.c.id,
    zstd_dicts.c.codec,
    zstd_dicts.c.size,
    zstd_dicts.c.digest,
    zstd_dicts.c.data,
)
"""The columns :func:`~alpstore.archive.reading.load_dictionary_row` decodes a dictionary from."""
