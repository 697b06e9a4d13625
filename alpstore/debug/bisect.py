"""``debug bisect``: the first checkpoint of a session where a predicate on the hydrated history
turns bad, in at most ⌈log2 n⌉ + 1 hydrations for n checkpoints.

The last checkpoint is tested first (it must be bad); then a binary search runs over the
checkpoints with the empty history before the first one as the known-good bound, so the first
checkpoint is tested only if the search reaches it — and if it is bad, that is reported as an
error rather than a guess.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from alpstore.debug.entries import history_jsonl, load_entries, shown_text
from alpstore.debug.history import view_delta
from alpstore.errors import NotFoundError, UsageError
from alpstore.sessions import CheckpointInfo, Entry
from alpstore.views import EMPTY

if TYPE_CHECKING:
    from alpstore.core.store import CoreStore as Store
    from alpstore.sessions import Session

Predicate = Callable[[CheckpointInfo, list[Entry]], bool]
"""``(checkpoint, hydrated history) -> True when bad``."""

EXEC_TIMEOUT = 600.0
"""Seconds an ``--exec`` command may run on one checkpoint."""
SKIP_CODES = range(125, 256)
"""Exit codes that mean the command itself failed (as in ``git bisect run``), not "bad"."""


@dataclass(frozen=True)
class BisectResult:
    """The first bad checkpoint, the last good one before it, and what it took to find them."""

    first_bad: CheckpointInfo
    last_good: CheckpointInfo
    hydrations: int
    checkpoints: int
    tested: list[tuple[CheckpointInfo, bool]]
    """Every checkpoint tested, in order, with True for bad."""
    added: list[tuple[int, Entry]] = field(default_factory=list)
    """The entries the first bad checkpoint added over the last good one."""

    @property
    def bound(self) -> int:
        """The most hydrations a search over this many checkpoints may take."""
        return max_hydrations(self.checkpoints)


def max_hydrations(n: int) -> int:
    """⌈log2 n⌉ + 1: the bound bisect keeps for ``n`` checkpoints."""
    return math.ceil(math.log2(n)) + 1 if n > 1 else 1


def grep_predicate(pattern: str) -> Predicate:
    """Bad when ``pattern`` (a Python regex) matches the history as shown (one ``role: text``
    line an entry, tool calls' names and arguments included).

    Raises:
        UsageError: the pattern is not a valid regular expression.
    """
    try:
        regex = re.compile(pattern, re.MULTILINE)
    except re.error as err:
        raise UsageError(f"--grep {pattern!r}: not a valid regular expression ({err})") from err

    lines: dict[bytes, str] = {}

    def bad(_ck: CheckpointInfo, entries: list[Entry]) -> bool:
        return regex.search(shown_text(entries, lines)) is not None

    return bad


def exec_predicate(command: str, *, cwd: str | None = None) -> Predicate:
    """Bad when ``command`` (run by ``/bin/sh -c`` with the history as JSON Lines on stdin)
    exits 1–124; 0 is good. ``ALPSTORE_BISECT_CHECKPOINT``, ``…_SESSION`` and ``…_TURN`` name
    the checkpoint under test.

    Raises (when called):
        UsageError: the command could not run, was killed, or exited 125 or more (its stderr
            is quoted).
    """
    lines: dict[bytes, str] = {}

    def bad(ck: CheckpointInfo, entries: list[Entry]) -> bool:
        env = {
            **os.environ,
            "ALPSTORE_BISECT_CHECKPOINT": str(ck.id),
            "ALPSTORE_BISECT_SESSION": ck.session,
            "ALPSTORE_BISECT_TURN": str(ck.turn),
        }
        try:
            proc = subprocess.run(
                ["/bin/sh", "-c", command],
                input=history_jsonl(entries, lines).encode("utf-8"),
                capture_output=True,
                cwd=cwd,
                env=env,
                timeout=EXEC_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired as err:
            raise UsageError(
                f"--exec {command!r} ran longer than {EXEC_TIMEOUT:.0f} s on checkpoint {ck.id}"
            ) from err
        except OSError as err:
            raise UsageError(f"--exec {command!r}: cannot run ({err.strerror})") from err
        code = proc.returncode
        if code == 0:
            return False
        if 0 < code < SKIP_CODES.start:
            return True
        stderr = " ".join(proc.stderr.decode("utf-8", "replace").split())[:300]
        how = f"was killed by signal {-code}" if code < 0 else f"exited {code}"
        raise UsageError(
            f"--exec {command!r} {how} on checkpoint {ck.id} (turn {ck.turn})"
            + (f": {stderr}" if stderr else " with no stderr"),
            hint="exit 0 means good, 1-124 bad; 125 and above mean the command itself failed",
        )

    return bad


def bisect(
    store: Store,
    session: Session,
    predicate: Predicate,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> BisectResult:
    """Find the first retained checkpoint of ``session`` whose history ``predicate`` calls bad.

    Raises:
        NotFoundError: the session has no checkpoint.
        UsageError: the predicate is good at the last checkpoint or already bad at the first
            (nothing to bisect; no guess is made), or an ``--exec`` command failed.
    """
    cks = session.checkpoints()
    if not cks:
        raise NotFoundError(f"session {session.uuid} has no checkpoint to bisect")
    n = len(cks)
    budget = max_hydrations(n)
    tested: list[tuple[CheckpointInfo, bool]] = []

    def is_bad(i: int) -> bool:
        verdict = predicate(cks[i], store.hydrate(cks[i]))
        tested.append((cks[i], verdict))
        if progress is not None:
            progress(len(tested), budget)
        return verdict

    last = cks[-1]
    if not is_bad(n - 1):
        raise UsageError(
            f"the predicate is good at the last checkpoint of {session.uuid} "
            f"(turn {last.turn}, checkpoint {last.id}): nothing turned bad",
            hint="check the pattern or command against `alpstore debug show SESSION@latest`",
        )
    lo, hi = -1, n - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if is_bad(mid):
            hi = mid
        else:
            lo = mid
    if hi == 0:
        first = cks[0]
        raise UsageError(
            f"the predicate is already bad at the first checkpoint of {session.uuid} "
            f"(turn {first.turn}, checkpoint {first.id}): no good checkpoint to start from",
        )
    good, bad = cks[lo], cks[hi]
    d = view_delta(store, good.view if lo >= 0 else EMPTY, bad.view)
    loaded = load_entries(store, [b for _, b in d.added])
    return BisectResult(bad, good, len(tested), n, tested, [(p, loaded[b]) for p, b in d.added])
