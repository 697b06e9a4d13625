from __future__ import annotations

import json
from pathlib import Path

from alpstore.maintenance import gc, verify
from alpstore.sessions import Retention
from alpstore.store import Store


def _turn(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i} " * 40}]


def test_gc_after_pruning_keeps_every_retained_checkpoint(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    s = store.create_session(retention=Retention("last_n", 3))
    expected = {}
    for i in range(12):
        ck = s.commit_turn(_turn(i))
        expected[ck.id] = [m for t in range(i + 1) for m in _turn(t)]
    s.backtrack(1, "steer")  # a branch: later appends start a new segment sharing the prefix
    for i in range(12, 15):
        ck = s.commit_turn(_turn(i))
    other = store.create_session(retention=Retention("single"))
    for i in range(5):
        other.commit_turn(_turn(100 + i))
    retained = s.checkpoints(include_abandoned=True)
    assert len([c for c in retained if not c.abandoned]) == 3
    before = {c.id: [e.value for e in store.hydrate(c)] for c in retained}
    report = gc(store)
    assert report.blobs_removed >= 0
    for c in retained:
        assert [e.value for e in store.hydrate(store.get_checkpoint(c.id))] == before[c.id]
    assert len(other.checkpoints()) == 1  # retention pruned only that session's checkpoints
    assert [e.value for e in other.history()] == [m for i in range(5) for m in _turn(100 + i)]
    assert verify(store).ok
    for ck_id, history in expected.items():
        if ck_id in before:
            assert before[ck_id] == history


def test_pruned_checkpoints_free_their_unshared_structure(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    s = store.create_session(retention=Retention("single"))
    for i in range(5):
        s.commit_turn(_turn(i))
    s.resume(store.resolve_checkpoint(f"{s.uuid}@latest"))
    s.truncate_and_append(2, [{"role": "user", "content": "rewritten"}])
    s.checkpoint()
    report = gc(store)
    assert report.blobs_removed == 8  # turns 1..4 are referenced by nothing any more
    assert [e.value["content"] for e in s.history()] == ["q0", "a0 " * 40, "rewritten"]
    assert verify(store).ok


def test_every_operation_is_an_event_line(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    s = store.create_session(name="ev")
    for i in range(3):
        s.commit_turn(_turn(i))
    s.fold(0, 2, "first turn")
    s.backtrack(1, "again")
    s.fork(store.resolve_checkpoint(f"{s.uuid}@1"))
    store.close()
    lines = (tmp_path / "traces" / "events.jsonl").read_text().splitlines()
    kinds = [json.loads(line)["event"] for line in lines]
    assert kinds.count("checkpoint") == 3
    assert {"session", "fold", "backtrack", "fork"} <= set(kinds)


def test_gc_keeps_the_prefix_a_kept_segment_branches_from(tmp_path: Path) -> None:
    """Found by the kill -9 test: a segment kept only as an ancestor (none of its own entries
    needed) still branches from its parent at base_length; GC must not cut the parent shorter."""
    store = Store.open(tmp_path)
    s = store.create_session(retention=Retention("single"))
    s.append([{"role": "user", "content": f"m{i}"} for i in range(10)])
    s.checkpoint()
    s.truncate_and_append(8, [{"role": "user", "content": "x"}])
    s.checkpoint()
    s.truncate_and_append(3, [{"role": "user", "content": "y"}])
    s.checkpoint()
    gc(store)
    assert verify(store).ok
    assert [e.value["content"] for e in s.history()] == ["m0", "m1", "m2", "y"]
