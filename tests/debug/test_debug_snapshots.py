"""Snapshot tree (SN-1, SN-2): model-based — promote and discard leave the live run exactly as a
plain list says; the cursor never changes it; pause blocks the next append until resume."""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from alpstore.debug.snapshots import SnapshotTree
from alpstore.errors import CanonicalJSONError, NotFoundError, SessionStateError, UsageError
from alpstore.sessions import CheckpointInfo
from alpstore.store import Store
from tests.debug._debug_helpers import open_store, simple_session, values

messages = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "assistant"]),
            "content": st.text(alphabet="abcé ", max_size=4),
        }
    ),
    min_size=1,
    max_size=3,
)


class SnapshotMachine(RuleBasedStateMachine):
    snapshots = Bundle("snapshots")

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.store = Store.open(self.dir)
        self.session = self.store.create_session(name="model")
        self.tree = SnapshotTree(self.session)
        self.model: list[Any] = []
        self.expected: dict[str, list[Any]] = {}
        self.persisted: list[tuple[CheckpointInfo, list[Any]]] = []

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(msgs=messages)
    def append_live(self, msgs: list[Any]) -> None:
        self.session.append(msgs)
        self.model += msgs

    @rule(target=snapshots)
    def take(self) -> str:
        snap = self.tree.take_snapshot(kernel={"n": len(self.model)})
        self.expected[snap.id] = list(self.model)
        return snap.id

    @rule(sid=snapshots)
    def walk(self, sid: str) -> None:
        self.tree.walk(sid)
        assert values(self.tree.history()) == self.expected[sid]

    @rule(sid=snapshots)
    def promote(self, sid: str) -> None:
        self.tree.promote(sid)
        self.model = list(self.expected[sid])

    @rule(sid=snapshots)
    def persist(self, sid: str) -> None:
        ck = self.tree.persist(sid)
        self.persisted.append((ck, list(self.expected[sid])))

    @rule(
        sid=snapshots,
        msgs=messages,
        ending=st.sampled_from(["discard", "raise", "promote", "persist"]),
        inner=st.booleans(),
    )
    def branch(self, sid: str, msgs: list[Any], ending: str, inner: bool) -> None:
        nodes = set(self.tree.nodes)
        goal = self.expected[sid] + msgs
        try:
            with self.tree.branch(sid) as b:
                b.append(msgs)
                assert values(b.history()) == goal
                if inner:
                    b.snapshot(label="inside")
                if ending == "raise":
                    raise KeyError("boom")
                if ending == "promote":
                    b.promote()
                    self.model = goal
                elif ending == "persist":
                    self.persisted.append((b.persist(), goal))
        except KeyError:
            pass
        if ending in ("discard", "raise"):
            assert set(self.tree.nodes) == nodes

    @invariant()
    def live_is_the_model(self) -> None:
        assert values(self.session.history()) == self.model

    @invariant()
    def persisted_checkpoints_hold_their_branch(self) -> None:
        for ck, goal in self.persisted[-3:]:
            assert values(self.store.hydrate(ck)) == goal


TestSnapshotModel = SnapshotMachine.TestCase
TestSnapshotModel.settings = settings(max_examples=25, stateful_step_count=15, deadline=None)


def test_discarding_a_branch_keeps_a_node_it_merely_reached_again(tmp_path: Path) -> None:
    """Found by the model test in CI: a branch that reaches an existing state (same content
    hash) must not take that node with it when it is discarded."""
    store = open_store(tmp_path / "run")
    s = store.create_session(name="m")
    tree = SnapshotTree(s)
    s.append([{"role": "user", "content": ""}])
    base = tree.take_snapshot()
    s.append([{"role": "user", "content": ""}])
    with tree.branch(base.id) as b:
        b.append([{"role": "user", "content": ""}])
        b.promote()
    before = set(tree.nodes)
    with tree.branch(base.id) as b:
        b.append([{"role": "user", "content": ""}])
        b.snapshot(label="inside")
    assert set(tree.nodes) == before
    store.close()


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = open_store(tmp_path / "run")
    yield s
    s.close()


def test_snapshot_ids_are_content_hashes_and_write_nothing(store: Store) -> None:
    s = simple_session(store, 3)
    tree = SnapshotTree(s)
    cks = len(s.checkpoints(include_abandoned=True))
    a = tree.take_snapshot(kernel={"k": 1})
    assert tree.take_snapshot(kernel={"k": 1}).id == a.id
    b = tree.take_snapshot(kernel={"k": 2})
    assert b.id != a.id and len(a.id) == 64
    assert len(s.checkpoints(include_abandoned=True)) == cks
    assert tree.get(b.id[:8]) == b
    # a branch that reaches the same state as the live run has the same id
    with tree.branch(a.id) as br:
        br.append([{"role": "user", "content": "more"}])
        in_branch = br.snapshot()
    s.append([{"role": "user", "content": "more"}])
    assert tree.take_snapshot(kernel={"k": 1}).id == in_branch.id


def test_cursor_walks_without_touching_the_live_run(store: Store) -> None:
    s = simple_session(store, 2)
    tree = SnapshotTree(s)
    first = tree.take_snapshot()
    s.append([{"role": "user", "content": "q3"}])
    second = tree.take_snapshot()
    head = s.info().head
    assert tree.walk(first.id) == first and tree.cursor == first.id
    assert len(tree.history()) == 4
    assert second.parent == first.id
    tree.walk(second.id)
    assert tree.up() == first
    assert tree.children(first.id) == [second]
    with pytest.raises(UsageError):
        tree.up()
    assert s.info().head == head


def test_persist_and_promote_record_decisions_and_keep_state(store: Store) -> None:
    s = simple_session(store, 2)
    tree = SnapshotTree(s)
    snap = tree.take_snapshot(kernel={"q": {"x": 1}}, working_memory=[{"agent_id": "a"}])
    s.append([{"role": "user", "content": "later"}])
    ck = tree.persist(snap.id, label="before-later")
    assert ck.trigger == "snapshot" and ck.label == "before-later" and ck.length == 4
    assert store.checkpoint_state(ck) == ({"q": {"x": 1}}, [{"agent_id": "a"}])
    assert values(s.history())[-1] == {"role": "user", "content": "later"}
    promoted = tree.promote(snap.id)
    assert s.info().head == promoted.view and len(s.history()) == 4
    actions = [e["detail"]["action"] for e in store.session_events(s.id) if e["kind"] == "snapshot"]
    assert actions == ["persist", "promote"]


def test_closed_branch_and_unknown_snapshot(store: Store) -> None:
    tree = SnapshotTree(simple_session(store, 1))
    with tree.branch() as b:
        pass
    with pytest.raises(UsageError):
        b.append([{"role": "user", "content": "x"}])
    with pytest.raises(NotFoundError):
        tree.get("ffff")
    with tree.branch() as b2, pytest.raises(CanonicalJSONError):
        b2.append([{"role": "user", "content": float("nan")}])


def test_pause_blocks_the_next_append_until_resume(store: Store) -> None:
    s = simple_session(store, 1)
    tree = SnapshotTree(s)
    tree.pause()
    with pytest.raises(SessionStateError):
        s.append([{"role": "user", "content": "refused"}])
    with pytest.raises(SessionStateError, match="paused"):
        tree.append([{"role": "user", "content": "x"}], timeout=0)
    with pytest.raises(SessionStateError):
        tree.promote(tree.take_snapshot().id)
    done = threading.Event()
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            tree.append([{"role": "user", "content": "after pause"}], checkpoint=True)
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)
        done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    assert not done.wait(0.3), "the append went through while paused"
    assert len(s.history()) == 2
    tree.resume()
    thread.join(30)
    assert done.is_set() and not errors
    assert values(s.history())[-1] == {"role": "user", "content": "after pause"}
    assert s.info().status == "active"
