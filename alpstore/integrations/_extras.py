"""The optional extras the integrations need: importing one without its framework installed
is an ``ImportError`` that names the ``pip install`` line, not a bare ``No module named …``.
"""

from __future__ import annotations


def missing(extra: str, what: str, err: ImportError) -> ImportError:
    """The error for importing ``what`` without the ``extra`` it needs (``err``: the import's)."""
    return ImportError(
        f"{what} needs the {extra!r} extra ({err}): pip install 'alpstore[{extra}]' "
        f"(from a clone of alpstore: pip install -e '.[{extra}]')",
        name=err.name,
    )
