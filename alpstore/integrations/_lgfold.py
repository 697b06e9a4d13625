"""The saver's closed turns folded into ``lg_turns`` rows (0011, issue 42), off the caller's
thread: when a put of a new invoke's input commits (its metadata ``source == "input"``: the
thread's last turn is over), the turns before it become one row each (``_lgturns.fold_before``)
in a short transaction of the saver's folding thread, the thread's session row locked as a put
locks it; on PostgreSQL every :data:`EVERY_ON_POSTGRESQL` turns, in two round trips
(``_lgfoldpg``). Nothing is added to ``put``: on PostgreSQL it keeps its one round trip.

A failure is kept in ``Folder.error`` (the steps stay loose, read as before) and never raised
into LangGraph's calls.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from alpstore.integrations import _lgdb as lgdb
from alpstore.integrations import _lgfoldpg as lgfoldpg
from alpstore.integrations import _lgturns as lgturns
from alpstore.integrations._lgpack import id_bytes
from alpstore.portable.lgrows import (
    TurnDictionary,
    store_turn_dictionary,
    train_turn_dictionary,
    turn_dictionary,
    turn_samples,
)

FOLD = True
"""Fold closed turns (off: every step stays loose, as before 0011; the tests that fold by hand
turn it off)."""

FOLD_ON_POSTGRESQL = True
"""Fold on PostgreSQL too: every :data:`EVERY_ON_POSTGRESQL` turns, in two round trips
(:data:`PIPELINED`). Through the delay line at 2 ms one way (``bench_network.py``, 100 tool-loop
turns, alternating runs) the saver's turn is the same with it as without it (97.3 and 102.2 ms
against 98.5 and 94.6; 14.3–14.6 round trips against 14.2). The first fold on PostgreSQL, ~17
statements sent one at a time under the thread's lock at every turn, took a turn from 85.5 to
180.0 ms; it was off by default until the two below."""


TRAIN_CHECK_EVERY = 16
"""While the archive has no turn dictionary, the folding thread looks again (another process
may have trained one, or enough turns are closed to train one) after this many turn rows."""

EVERY_ON_POSTGRESQL = 8
"""On PostgreSQL a fold runs at every 8th input step of a thread (counted in this process),
folding the closed turns before it in one go: its two round trips shared by 8 turns. A process
that stops in between leaves them loose; the next fold of the thread takes them too."""

PIPELINED = True
"""On PostgreSQL, fold in two round trips (``_lgfoldpg``: read unlocked, then lock, check and
write with the COMMIT) instead of ~17 statements sent one at a time under the thread's lock."""


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
        """Turn rows made."""
        self._inputs: dict[tuple[str, str], int] = {}
        self._dictionary: TurnDictionary | None = None
        """The archive's turn dictionary (0013), once this thread has found or trained one."""
        self._look_at = 0
        """``folded`` at which the folding thread looks for (or trains) a dictionary again."""

    def after_input(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        """A thread's input step committed: fold the turns before it (on the folding thread),
        every turn on SQLite, every :data:`EVERY_ON_POSTGRESQL` turns on PostgreSQL.
        """
        remote = self._store.db.is_postgresql
        if not FOLD or (remote and not FOLD_ON_POSTGRESQL):
            return
        with self._lock:
            if len(self._inputs) > 4096:  # a bounded memory of many threads: counts restart
                self._inputs.clear()
            seen = self._inputs[thread_id, ns] = self._inputs.get((thread_id, ns), 0) + 1
            if remote and seen % max(1, EVERY_ON_POSTGRESQL):
                return
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
                trained: BaseException | None = None
                if self._dictionary is None and self.folded >= self._look_at:
                    self._look_at = self.folded + TRAIN_CHECK_EVERY
                    try:
                        self._find_or_train()
                    except Exception as err:  # kept; folds go on with the fixed dictionary
                        trained = err
                self._store.db.retrying(
                    lambda job=job: self._fold(*job), what="a LangGraph turn's steps folded"
                )
                self.error = trained
            except BaseException as err:  # kept; the steps stay loose and read as before
                self.error = err
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()

    def _find_or_train(self) -> None:
        """The archive's turn dictionary, or one trained from its newest closed turns once it
        holds enough (outside any transaction: ~0.5 s, once an archive); the first stored wins.
        """
        db = self._store.db
        with db.read() as conn:
            self._dictionary = turn_dictionary(conn)
            samples = [] if self._dictionary is not None else turn_samples(conn)
        if not samples:
            return
        data = train_turn_dictionary(samples)
        if data is None:  # zstd could not learn one from them: try again after more turns
            return
        with db.atomic() as conn:
            store_turn_dictionary(conn, data, len(samples))
        with db.read() as conn:
            self._dictionary = turn_dictionary(conn)

    def _fold(self, thread_id: str, ns: str, checkpoint_id: str) -> None:
        if (
            self._store.db.is_postgresql
            and PIPELINED
            and self._pipelined(thread_id, ns, checkpoint_id)
        ):
            return
        with self._store.db.atomic() as conn:
            row = lgdb.lock_thread(conn, thread_id, ns)
            if row is not None:
                self.folded += lgturns.fold_before(conn, row.ref, checkpoint_id, self._dictionary)

    def _pipelined(self, thread_id: str, ns: str, checkpoint_id: str) -> bool:
        """PostgreSQL: the fold in two round trips (``_lgfoldpg``); False when it must go the
        plain way (not batchable, or the loose rows changed between its read and its write).
        """
        below = id_bytes(checkpoint_id)
        with self._store.db.read() as conn:
            turn = lgfoldpg.read(conn, thread_id, ns, below)
        if turn is None:
            return False
        if turn is False:
            return True
        assert not isinstance(turn, bool)
        try:
            with self._store.db.atomic() as conn:
                made = lgfoldpg.write(conn, below, turn, self._dictionary)
                if made is None:
                    raise _Plain
        except _Plain:
            return False
        except Exception as err:
            if lgfoldpg.moved(err):
                return False
            raise
        self.folded += made
        return True


class _Plain(Exception):
    """The pipelined fold could not be queued: nothing was sent; fold the plain way."""
