"""``Session.write_turns`` (an import's turns in a few statements, issue 41) leaves what
``commit_turn`` and ``append`` one by one leave: the same head, turn count and covering digest,
the same checkpoints (seq, turn, view length, covering digest, label, trigger) and the same
history read back; in batches of any split, a long turn in several pieces, messages repeated
across turns, on both backends; a session whose retention prunes takes the one-by-one path and
prunes as it does.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from alpstore.archive.sql import encode
from alpstore.sessions import Retention
from tests.conftest import Backend

# a piece: (its messages as small ints, does it end the turn); a message n < 5 repeats
pieces = st.lists(
    st.tuples(st.lists(st.integers(0, 30), min_size=1, max_size=5), st.booleans()),
    min_size=1,
    max_size=14,
)


def _message(n: int, k: int) -> dict[str, Any]:
    if n < 5:
        return {"role": "assistant", "content": f"again {n}"}
    role = "user" if k == 0 else "assistant"
    return {"role": role, "content": f"message {n} " * (1 + n % 4)}


def _pieces(raw: list[tuple[list[int], bool]]) -> list[tuple[list[dict[str, Any]], bool]]:
    out = [([_message(n, k) for k, n in enumerate(nums)], ends) for nums, ends in raw]
    return [*out[:-1], (out[-1][0], True)]  # the last piece ends its turn


def _state(store: Any, sid: str) -> tuple[Any, ...]:
    session = store.get_session(sid)
    info = session.info()
    cks = [
        (c.seq, c.turn, c.view.length, c.covering_digest, c.label, c.trigger)
        for c in store.list_checkpoints(info.id)
    ]
    with store.db.read() as conn:
        (head_digest,) = conn.exec_driver_sql(
            f"SELECT head_digest FROM sessions WHERE id = {int(info.id)}"
        ).one()
    history = [(e.digest, e.kind, e.value) for e in session.history()]
    return (info.turn, info.head.length, info.status, bytes(head_digest), cks, history)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=pieces, split=st.integers(1, 6))
def test_write_turns_leaves_what_turn_by_turn_leaves(
    backend: Backend, raw: list[tuple[list[int], bool]], split: int
) -> None:
    store = backend.open_store()
    work = _pieces(raw)
    one = store.create_session()
    for messages, ends in work:
        if ends:
            one.commit_turn(messages, trigger="every_turn")
        else:
            one.append(messages)
    bulk = store.create_session()
    with store.db.atomic() as conn, bulk.deferring_head(conn):
        for start in range(0, len(work), split):
            held = [
                (messages, [encode(m) for m in messages], ends)
                for messages, ends in work[start : start + split]
            ]
            bulk.write_turns(conn, held, trigger="every_turn")
    assert _state(store, bulk.uuid) == _state(store, one.uuid)


def test_write_turns_prunes_as_one_by_one_under_a_retention(backend: Backend) -> None:
    store = backend.open_store()
    work = [([{"role": "user", "content": f"q{i}"}], True) for i in range(6)]
    sessions = []
    for bulk in (False, True):
        s = store.create_session()
        store.bind_policy(s.id, {"retention": "last_n"}, Retention("last_n", 2))
        s = store.get_session(s.uuid)  # a handle that knows the retention
        if bulk:
            with store.db.atomic() as conn:
                s.write_turns(conn, [(m, [encode(x) for x in m], e) for m, e in work])
        else:
            for m, _ in work:
                s.commit_turn(m)
        sessions.append(s)
    a, b = (_state(store, s.uuid) for s in sessions)
    assert [c[:3] for c in a[4]] == [c[:3] for c in b[4]]
    assert len(b[4]) == 2
