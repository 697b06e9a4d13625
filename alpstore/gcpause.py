"""Bulk work that builds many acyclic objects holds off the cyclic garbage collector."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_gc_pause() -> Iterator[None]:
    """Hold off the cyclic garbage collector while thousands of acyclic objects (messages and
    their dicts, rows) are built: each batch would otherwise trigger collections that walk the
    whole heap. Reference counting still frees everything; re-enabled after, unless it was off.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
