"""What an ``AlpstoreSaver`` process knows: of one LangGraph thread + namespace (``ThreadState``:
the head's kept messages, digests, the lists a put or a read saw; how a put finds what is new by
identity with those lists), and of all of them (``SaverState``, the saver's base class: the
store, the threads kept, the sessions' infos, the runs known, the live sessions of a policy).
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from itertools import compress, count
from operator import is_not
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.base import SerializerProtocol

from alpstore.integrations._lgcodec import FrozenMessages
from alpstore.integrations._lgdb import HeadRow
from alpstore.integrations._lgfold import Folder
from alpstore.integrations._lgpack import Packer
from alpstore.live import LiveSession
from alpstore.policy.recorded import SessionPolicy
from alpstore.sessions import SessionInfo
from alpstore.store import Store
from alpstore.views import View


class ThreadState:
    """What this process knows of one thread + namespace, while its key matches the database.

    The key (thread row, session row and uuid, head view and covering digest) is
    checked in the statement every put and read makes anyway; a mismatch forgets it all:

    - ``private``: the head's messages as this process keeps them (marshalled states: reads
      build new objects from them at C speed, see ``FrozenMessages``);
    - ``digests``: the head entries' digests, when known;
    - ``seen``: lists of message objects the caller passed to a put for the head, compared
      by identity so a put finds the new tail in O(delta);
    - ``handed``: lists of message objects a read handed out for the head; the caller may
      have changed those in place, so a prefix found through them counts only as far as it
      still equals the kept states;
    - ``last_put``: the last checkpoint stored (id, channel versions, refs).

    Nothing here is keyed by a row id another transaction could delete and reuse.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.key: tuple[int, int, str, View, bytes | None] | None = None
        self.private: FrozenMessages | None = None
        self.digests: list[bytes] | None = None
        self.seen: deque[list[Any]] = deque(maxlen=SEEN_LISTS)
        self.handed: deque[list[Any]] = deque(maxlen=SEEN_LISTS)
        self.last_put: tuple[str, dict[str, Any], dict[str, list[Any]]] | None = None
        self.known: Any = None
        """PostgreSQL: the thread's row and head (an ``_lgdb.HeadRow``) as this process's last
        put left them, at the unsealed tip of the session's own segment: the next put may send
        them unread (guarded, ``_lgfast.begin_at_known_head``). Valid only while ``key``
        matches it."""
        self.writers: OrderedDict[str, list[str]] = OrderedDict()
        """LangGraph checkpoint id → the nodes whose pending writes this process stored on
        it (the nodes of the step that follows it): only names for display, keyed by ids
        LangGraph never reuses, so it is kept across ``forget``."""

        self.writing: dict[str, int] = {}
        """LangGraph checkpoint id → this process's ``put_writes`` on it in their transactions
        now (run outside ``lock``, beside the thread's put in flight); guarded by
        ``settled``."""
        self.settled = threading.Condition(threading.Lock())

        self.unnamed: OrderedDict[str, tuple[int, str]] = OrderedDict()
        """LangGraph checkpoint id → the alpstore checkpoint (and trigger) of a step put
        before the writes on its parent were (LangGraph saves both in the background): the
        writes, once stored, name its node."""

    def note_writer(self, checkpoint_id: str, node: str | None) -> list[str]:
        """Remember that ``node`` wrote on ``checkpoint_id`` (None: a task of no node, so
        nothing to read back for it); the nodes noted there so far.
        """
        nodes = self.writers.setdefault(checkpoint_id, [])
        if node is not None and node not in nodes:
            nodes.append(node)
        self.writers.move_to_end(checkpoint_id)
        while len(self.writers) > WRITERS_KEPT:
            self.writers.popitem(last=False)
        return list(nodes)

    def writes_begin(self, checkpoint_id: str) -> None:
        """A ``put_writes`` on ``checkpoint_id`` starts (before its transaction)."""
        with self.settled:
            self.writing[checkpoint_id] = self.writing.get(checkpoint_id, 0) + 1

    def writes_end(self, checkpoint_id: str) -> None:
        """That ``put_writes`` is over: committed and its node noted, or failed."""
        with self.settled:
            left = self.writing[checkpoint_id] - 1
            if left:
                self.writing[checkpoint_id] = left
            else:
                del self.writing[checkpoint_id]
                self.settled.notify_all()

    def writes_settled(self, checkpoint_id: str) -> None:
        """Wait (before taking ``lock``, holding nothing) until no ``put_writes`` of this
        process on ``checkpoint_id`` is in flight, so a put of the step after it finds their
        nodes noted instead of reading the writes back. Only calls already running are
        waited for (an async lane's queued call never is), at most ``WRITES_WAIT_S``: past
        that the put reads them back, as for another process's writes.
        """
        with self.settled:
            self.settled.wait_for(lambda: checkpoint_id not in self.writing, WRITES_WAIT_S)

    def note_unnamed(self, parent: str, ck_id: int, trigger: str) -> None:
        self.unnamed[parent] = (ck_id, trigger)
        while len(self.unnamed) > WRITERS_KEPT:
            self.unnamed.popitem(last=False)

    def validate(self, row: HeadRow) -> bool:
        """Forget everything unless ``row`` is the head this state describes; True if kept."""
        if self.key == row.key:
            return True
        self.key = row.key
        self.private = None
        self.digests = None
        self.seen.clear()
        self.handed.clear()
        self.last_put = None
        return False

    def forget(self) -> None:
        """Forget everything (after a failed write)."""
        self.key = None
        self.known = None
        self.private = None
        self.digests = None
        self.seen.clear()
        self.handed.clear()
        self.last_put = None


WRITES_WAIT_S = 30.0
"""How long a put waits for this process's pending writes on its parent still in flight."""

WRITERS_KEPT = 16
"""How many checkpoints' writing nodes a thread remembers (a put reads its parent's)."""

SEEN_LISTS = 4
"""How many caller-held message lists (of each kind) a thread remembers for identity
comparison."""


def identity_prefix(a: list[Any], b: list[Any]) -> int:
    """How many leading items of ``a`` and ``b`` are the same objects (a C-speed scan)."""
    return next(compress(count(), map(is_not, a, b)), min(len(a), len(b)))


def held_prefix(held: Iterable[list[Any]], messages: list[Any]) -> int:
    """How many leading messages are those of a list the caller held (the longest match).

    The common case — ``messages`` is a held list plus new ones — is decided by list equality,
    a C loop that takes an identical pair at pointer speed (a pair that is not identical is
    compared by value: equal fields, the same document); only when no held list is a whole
    prefix is the identity scan run.
    """
    n = len(messages)
    whole = [
        len(h)
        for h in held
        if len(h) <= n and (not h or h[-1] is messages[len(h) - 1]) and h == messages[: len(h)]
    ]
    if whole:
        return max(whole)
    return max((identity_prefix(h, messages) for h in held), default=0)


class SaverState(BaseCheckpointSaver[int]):
    """What an ``AlpstoreSaver`` process keeps between calls (its write and read paths take it
    as their first argument); ``_lock`` guards the dictionaries, never held over I/O.
    """

    def __init__(
        self,
        store: Store,
        *,
        messages_key: str,
        serde: SerializerProtocol | None,
        policy: SessionPolicy | None,
        max_threads: int,
    ) -> None:
        super().__init__(serde=serde)
        self.store = store
        self.messages_key = messages_key
        self._lock = threading.Lock()
        self._threads: OrderedDict[tuple[str, str], ThreadState] = OrderedDict()
        self._max_threads = max_threads
        self._infos: dict[str, SessionInfo] = {}  # by session uuid (never reused)
        self._runs: dict[str, None] = {}  # run ids known to have their lg_runs row
        self._packer = Packer()
        self._policy = policy
        self._live: dict[tuple[str, str], LiveSession] = {}
        self._folder = Folder(store)  # closed turns into lg_turns rows (0011)

    def _state(self, thread_id: str, ns: str) -> ThreadState:
        """This process's state of a thread namespace (the ``max_threads`` most recently used
        are kept; an evicted one is rebuilt from the archive when next used).
        """
        key = (thread_id, ns)
        with self._lock:
            th = self._threads.get(key)
            if th is None:
                th = self._threads[key] = ThreadState()
                while len(self._threads) > self._max_threads:
                    self._threads.popitem(last=False)
            else:
                self._threads.move_to_end(key)
            return th

    def _forget(self, thread_id: str | None = None) -> None:
        with self._lock:
            for key in list(self._threads):
                if thread_id is None or key[0] == thread_id:
                    self._threads[key].forget()


def thread_key(first: Any) -> str:
    """The LangGraph thread a call is for: a config's thread id, or the id itself."""
    if isinstance(first, Mapping):
        first = first.get("configurable", {}).get("thread_id")
    return "" if first is None else str(first)
