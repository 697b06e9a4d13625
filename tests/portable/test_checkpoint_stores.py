"""One contract for memory, disk and hybrid checkpoint stores (CK-5), retention (CK-8), cadence
(CK-4) and auto-resume selection (CK-9)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from alpstore.errors import NotFoundError, SecretError
from alpstore.policy import Retention, parse_policy
from alpstore.portable.cadence import decide, plan
from alpstore.portable.files import build_v2, manifest_hash
from alpstore.portable.resume import select_latest
from alpstore.portable.stores import CheckpointStore, open_checkpoint_store

MANIFEST = {"kind": "Agent", "metadata": {"name": "a"}, "spec": {}}


def doc(session: str, turn: int, label: str | None = None, **extra: Any) -> dict[str, Any]:
    return build_v2(
        session_id=session,
        label=label or f"turn-{turn:04d}",
        turn=turn,
        kernel=None,
        working_memory=[],
        manifest=extra.get("manifest", MANIFEST),
    )


@pytest.fixture(params=["memory", "disk", "hybrid"])
def cstore(request: pytest.FixtureRequest, tmp_path: Path) -> CheckpointStore:
    return open_checkpoint_store(request.param, tmp_path / "cks")


def test_put_get_list_delete(cstore: CheckpointStore) -> None:
    a = cstore.put(doc("s1", 1))
    b = cstore.put(doc("s1", 2))
    cstore.put(doc("s2", 1))
    assert a == "s1-turn-0001.json" and b == "s1-turn-0002.json"
    assert cstore.get(a)["turn"] == 1
    assert [m.name for m in cstore.list("s1")] == [a, b]
    assert len(cstore.list()) == 3
    cstore.delete(a)
    with pytest.raises(NotFoundError):
        cstore.get(a)
    with pytest.raises(NotFoundError):
        cstore.delete(a)
    assert cstore.load_for_resume(b)["turn"] == 2


def test_returned_documents_are_copies(cstore: CheckpointStore) -> None:
    name = cstore.put(doc("s1", 1))
    got = cstore.get(name)
    got["kernel"]["q"]["x"] = 1
    assert cstore.get(name)["kernel"]["q"] == {}


def test_same_name_replaces(cstore: CheckpointStore) -> None:
    cstore.put(doc("s1", 1, label="x"))
    cstore.put(doc("s1", 7, label="x"))
    assert [cstore.get(m.name)["turn"] for m in cstore.list("s1")] == [7]


def test_a_secret_stores_nothing(cstore: CheckpointStore) -> None:
    bad = doc("s1", 1)
    bad["kernel"]["run"]["password"] = "literal"
    with pytest.raises(SecretError):
        cstore.put(bad)
    assert cstore.list() == []


@pytest.mark.parametrize(
    ("retention", "left"),
    [(Retention("all"), 4), (Retention("single"), 1), (Retention("last_n", 2), 2)],
)
def test_retention_prunes_only_the_same_session(
    cstore: CheckpointStore, retention: Retention, left: int
) -> None:
    for t in range(1, 5):
        cstore.put(doc("abc", t))
        cstore.put(doc("abc-def", t))  # a session whose id extends ours: never touched
    removed = cstore.prune("abc", retention)
    assert len(removed) == 4 - left
    mine = [cstore.get(m.name)["turn"] for m in cstore.list("abc")]
    assert mine == list(range(5 - left, 5))
    assert len(cstore.list("abc-def")) == 4


def test_new_process_semantics(cstore: CheckpointStore) -> None:
    """memory: gone in a new process; disk and hybrid: the files load."""
    name = cstore.put(doc("s1", 3))
    reopened = cstore.reopen()
    if cstore.kind == "memory":
        assert reopened.list() == []
        with pytest.raises(NotFoundError):
            reopened.load_for_resume(name)
    else:
        assert reopened.load_for_resume(name)["turn"] == 3


def test_disk_retention_ignores_version_1_and_foreign_files(tmp_path: Path) -> None:
    store = open_checkpoint_store("disk", tmp_path)
    for t in range(3):
        store.put(doc("s", t))
    (tmp_path / "s-old.json").write_text(json.dumps({"version": 1, "kernel": {"q": {}, "run": {}}}))
    (tmp_path / "s-junk.json").write_text("not json")
    store.prune("s", Retention("single"))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "s-junk.json",
        "s-old.json",
        "s-turn-0002.json",
    ]


def test_hybrid_reads_memory_first_and_resumes_from_disk(tmp_path: Path) -> None:
    store = open_checkpoint_store("hybrid", tmp_path)
    name = store.put(doc("s", 1))
    (tmp_path / name).unlink()
    assert store.get(name)["turn"] == 1  # in-process copy
    with pytest.raises(NotFoundError):
        store.load_for_resume(name)  # a resume loads the disk copy


# ------------------------------------------------------------------ cadence (CK-4)
CADENCE = [
    ({}, "turn_completed", 1, None),
    ({}, "after_llm_call", 1, None),
    ({}, "manual", 1, "manual"),
    ({"mode": "every_turn"}, "turn_completed", 1, "every_turn"),
    ({"mode": "every_turn"}, "after_llm_call", 1, None),
    ({"mode": "every_turn", "triggers": ["after_llm_call"]}, "after_llm_call", 1, "after_llm_call"),
    ({"mode": "in_memory"}, "turn_completed", 4, "every_turn"),
    (
        {"mode": "on_event", "triggers": ["after_tool_call"]},
        "after_tool_call",
        1,
        "after_tool_call",
    ),
    ({"mode": "on_event", "triggers": ["after_tool_call"]}, "after_llm_call", 1, None),
    ({"mode": "on_event", "triggers": ["after_tool_call"]}, "turn_completed", 1, None),
    (
        {"mode": "on_event", "triggers": ["before_destructive_tool"]},
        "before_destructive_tool",
        1,
        "before_destructive_tool",
    ),
    (
        {"mode": "on_event", "triggers": ["every_n_turns"], "every_n_turns": 3},
        "turn_completed",
        3,
        "every_n_turns",
    ),
    (
        {"mode": "on_event", "triggers": ["every_n_turns"], "every_n_turns": 3},
        "turn_completed",
        4,
        None,
    ),
    (
        {"mode": "on_event", "triggers": ["every_n_turns"], "every_n_turns": 3},
        "turn_completed",
        0,
        None,
    ),
    ({"mode": "on_event", "triggers": ["after_llm_call"]}, "manual", 1, "manual"),
]


@pytest.mark.parametrize(("spec", "event", "turn", "expected"), CADENCE)
def test_cadence(spec: dict[str, Any], event: str, turn: int, expected: str | None) -> None:
    assert decide(parse_policy(spec), event, turn=turn) == expected


def test_plan_shallow_stays_a_row_and_manual_is_deep() -> None:
    shallow = parse_policy({"mode": "every_turn", "portability": "shallow"})
    assert plan(shallow, "turn_completed", turn=1) == plan(shallow, "turn_completed", turn=1)
    p = plan(shallow, "turn_completed", turn=1)
    assert p is not None and not p.write_file
    m = plan(shallow, "manual")
    assert m is not None and m.write_file  # AR-3
    deep = plan(parse_policy({"mode": "every_turn"}), "turn_completed", turn=1)
    assert deep is not None and deep.write_file
    fallback = plan(shallow, "turn_completed", turn=1, portability="self_contained")  # AR-2
    assert fallback is not None and fallback.write_file
    assert plan(parse_policy({}), "turn_completed", turn=1) is None


def test_unknown_event() -> None:
    with pytest.raises(Exception, match="checkpoint event 'lunch'"):
        decide(parse_policy({}), "lunch")


# ------------------------------------------------------------------ auto resume (CK-9)
def test_select_latest_matching_version_2(tmp_path: Path) -> None:
    other = {"kind": "Agent", "metadata": {"name": "other"}, "spec": {}}
    store = open_checkpoint_store("disk", tmp_path)
    older = store.put(doc("s", 5))
    newer = store.put(doc("s", 2, label="after-backtrack"))
    foreign = store.put(doc("t", 9, manifest=other))
    (tmp_path / "v1.json").write_text(json.dumps({"version": 1, "kernel": {"q": {}, "run": {}}}))
    (tmp_path / "bad.json").write_text("{")
    for i, name in enumerate([older, newer, foreign, "v1.json", "bad.json"]):
        os.utime(tmp_path / name, ns=(10**18 + i * 10**9, 10**18 + i * 10**9))
    sel = select_latest(tmp_path, manifest_hash(MANIFEST))
    assert sel.chosen is not None and sel.chosen.path.name == newer
    assert sel.considered == 5 and len(sel.skipped) == 3
    assert select_latest(tmp_path, "0" * 64).chosen is None
    assert select_latest(tmp_path / "missing", manifest_hash(MANIFEST)).chosen is None
