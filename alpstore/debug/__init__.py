"""Reverse debugging and error recovery over every-turn checkpoints.
A feature: may import sessions, archive, views, db and below (the store only to type it).

- :mod:`~alpstore.debug.snapshots`: in-process snapshot tree, cursor, branches, promote, persist,
  pause (SN-1, SN-2).
- :mod:`~alpstore.debug.governance`: the ``backtrack_on_error`` error-recovery binding (BT-2).
- :mod:`~alpstore.debug.history`, :mod:`~alpstore.debug.diff`, :mod:`~alpstore.debug.bisect`,
  :mod:`~alpstore.debug.expand`: log, show, replay, diff, bisect and expand over checkpoints.
- :mod:`~alpstore.debug.lineage`: the fork tree as tree, JSON, DOT, Mermaid or SVG.
"""

from __future__ import annotations
