"""The saver's closed turns folded into ``lg_turns`` rows (0011, issue 42), off the caller's
thread: when a put of a new invoke's input commits (its metadata ``source == "input"``: the
thread's last turn is over), the turn before it becomes one row (``_lgturns.fold_before``) in a
short transaction of the saver's folding thread, the thread's session row locked as a put
locks it. Nothing is added to ``put``: on PostgreSQL it keeps its one round trip.

A failure is kept in ``Folder.error`` (the steps stay loose, read as before) and never raised
into LangGraph's calls.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from alpstore.integrations import _lgdb as lgdb
from alpstore.integrations import _lgturns as lgturns

FOLD = True
"""Fold closed turns (off: every step stays loose, as before 0011; the tests that fold by hand
turn it off)."""

FOLD_ON_POSTGRESQL = False
"""Fold on PostgreSQL too. Off by default: a fold is a transaction of ~17 statements sent one at
a time, holding the thread's session row, which the thread's next put waits for. Measured
through the delay line at 2 ms one way (``bench_network.py``, 150 tool-loop turns): 85.5 ms a
turn (14.2 round trips) without folding, 180.0 ms (31.8) with it, twice issue 45's goal. On
PostgreSQL the writer leaves every step loose until a fold runs in one pipeline without holding
the thread; what migration 0011 folded, and a thread folded with this on, reads the same."""


class Folder:
    """One thread folding a saver's closed turns, in the order their inputs came."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._jobs: queue.SimpleQueue[tuple[str, str, str] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pending = 0
        self._idle = threading.Condition(self._lock)
        self.error: BaseException | None = None
        self.folded = 0

    def after_input(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        """A thread's input step committed: fold the turn before it (on the folding thread)."""
        if not FOLD or (self._store.db.is_postgresql and not FOLD_ON_POSTGRESQL):
            return
        with self._lock:
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="alpstore-lg-folder", daemon=True
                )
                self._thread.start()
        self._jobs.put((thread_id, ns, checkpoint_id))

    def wait(self) -> None:
        """Block until every fold asked for so far is done."""
        with self._idle:
            while self._pending:
                self._idle.wait()

    def close(self) -> None:
        """Finish the folds asked for, then stop the thread."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(None)
            thread.join()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                self._store.db.retrying(
                    lambda job=job: self._fold(*job), what="a LangGraph turn's steps folded"
                )
                self.error = None
            except BaseException as err:  # kept; the steps stay loose and read as before
                self.error = err
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _fold(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        with self._store.db.atomic() as conn:
            row = lgdb.lock_thread(conn, thread_id, ns)
            if row is not None and lgturns.fold_before(conn, row.ref, checkpoint_id) is not None:
                self.folded += 1
