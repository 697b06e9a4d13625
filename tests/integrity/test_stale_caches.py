"""Regression tests for issue 13: a long-lived process beside `gc` and other writers.

Each test keeps one store open (the long-lived process, with its caches) while other stores
(other processes) discard history, collect garbage and write again, then checks that the
long-lived store still writes and reads exactly what was committed. On the code before the
fix each of the first three failed on SQLite, which handed a collected row's id to the next
row: a delta against the wrong base, another session's messages, a false checksum error.
"""

from __future__ import annotations

from typing import Any

import pytest

from alpstore.errors import NotFoundError
from alpstore.maintenance import gc, verify
from alpstore.sessions import Retention
from tests.conftest import Backend


def tool_output(seed: int, variant: int = 0, lines: int = 120) -> dict[str, Any]:
    """A large tool output (a file read); the same seed with another variant differs in a few
    lines, so the archive stores the second as a delta against the first."""
    body = [
        f"{seed:04d}-{i:04d}: def function_{seed}_{i}(value): return value * {i} + {seed}"
        for i in range(lines)
    ]
    for k in range(variant):
        body[(k * 37) % lines] = f"edited {variant}.{k}"
    return {"role": "tool", "content": "\n".join(body)}


def msgs(store_session: Any) -> list[Any]:
    return [e.value for e in store_session.history()]


def test_delta_against_a_collected_base_stays_readable(backend: Backend) -> None:
    """Defect 1: the writer's delta-base cache named a blob `gc` had deleted (its id reused)."""
    writer = backend.open_store()
    s = writer.create_session()
    s.append([tool_output(1)])  # the newest blob: a delta base this process remembers
    s.truncate_and_append(0, [])  # the tool output is dropped (OpenAI Agents' pop_item)
    other = backend.open_store()
    report = gc(other)  # another process collects it; SQLite would hand its id on
    assert report.blobs_removed >= 1
    other.create_session().commit_turn([{"role": "user", "content": "hello"}])
    ck = s.commit_turn([tool_output(1, variant=1)])  # similar: stored as a delta
    fresh = backend.open_store()
    assert [e.value for e in fresh.hydrate(ck, verify=True)] == [tool_output(1, variant=1)]
    assert verify(fresh).ok


def test_stale_segment_shape_never_serves_another_sessions_messages(backend: Backend) -> None:
    """Defect 2: the segment-shape cache described a segment `gc` had deleted, whose id the
    next session's segment got: hydrating that session returned another session's messages."""
    reader = backend.open_store()
    writer = backend.open_store()
    s0 = writer.create_session()
    s0_msgs = [{"role": "user", "content": f"s0 message {i}"} for i in range(4)]
    ck0 = s0.commit_turn(s0_msgs)
    s1 = s0.fork(ck0)
    s1.append([{"role": "user", "content": "s1 branch"}])  # a segment branching from s0's
    assert len(reader.get_session(s1.uuid).history()) == 5  # the reader caches its shape
    s1.truncate_and_append(0, [])  # nothing refers to the branch any more
    gc(backend.open_store())
    s2 = writer.create_session()
    s2_msgs = [{"role": "user", "content": f"s2 message {i}"} for i in range(2)]
    s2.append(s2_msgs)
    assert msgs(reader.get_session(s2.uuid)) == s2_msgs


def test_stale_read_side_base_is_no_false_checksum_error(backend: Backend) -> None:
    """Defect 3: the reader's decoded-base cache held a collected base whose id a new base got."""
    reader = backend.open_store()
    w1 = backend.open_store()
    s = w1.create_session()
    s.append([tool_output(2)])
    s.append([tool_output(2, variant=1)])  # a delta against the first
    assert len(reader.get_session(s.uuid).history()) == 2  # the reader caches the base
    s.truncate_and_append(0, [])
    gc(backend.open_store())
    w2 = backend.open_store()  # a fresh writer: new, different large outputs
    t = w2.create_session()
    t.commit_turn([tool_output(3)])
    t.commit_turn([tool_output(3, variant=2)])
    assert msgs(reader.get_session(t.uuid)) == [tool_output(3), tool_output(3, variant=2)]


def test_a_cut_checkpoint_is_not_hydrated_from_a_regrown_segment(backend: Backend) -> None:
    """A checkpoint row deleted by retention, then `gc` trimming its segment: a caller still
    holding the old checkpoint gets a clear error, never the entries written there since."""
    store = backend.open_store()
    s = store.create_session(retention=Retention("single"))
    s.commit_turn([{"role": "user", "content": "a"}])
    s.append([{"role": "assistant", "content": "b"}])
    old = s.commit_turn([{"role": "user", "content": "c"}])  # pruned by the next one
    s.truncate_and_append(1, [])
    first = s.commit_turn([])  # retention single: `old` is deleted
    gc(backend.open_store())
    s.resume(first)
    s.append([{"role": "assistant", "content": "not"}, {"role": "user", "content": "old's"}])
    with pytest.raises(NotFoundError):
        store.hydrate(old)


def test_a_head_cut_back_to_its_branch_point_survives_gc(backend: Backend) -> None:
    """Found by the stress run: an append that branched a segment, then dropped again
    (`truncate_and_append(n, [])`, OpenAI Agents' `pop_item`), left the head naming a segment it
    takes no entry from; `gc` deleted that segment and the session could no longer be read."""
    store = backend.open_store()
    s = store.create_session()
    s.commit_turn([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    s.truncate_and_append(1, [{"role": "assistant", "content": "c"}])  # branches a segment
    s.truncate_and_append(1, [])  # ... and drops its only entry again
    gc(backend.open_store())
    assert msgs(s) == [{"role": "user", "content": "a"}]
    assert verify(backend.open_store()).ok
    s.append([{"role": "assistant", "content": "d"}])
    assert [m["content"] for m in msgs(backend.open_store().get_session(s.uuid))] == ["a", "d"]
