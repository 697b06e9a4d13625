"""diff (a fold shows the summary and the leaves it replaced; kernel/working memory as JSON
diffs), expand and fork --expand across compaction, log/replay/show over a session's past."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from alpstore.debug.diff import JsonChange, diff, json_diff
from alpstore.debug.expand import expand_rows, expanded_history, fork_expanded
from alpstore.debug.history import changes, show, timeline
from alpstore.errors import NotFoundError, UsageError
from alpstore.store import Store
from tests.debug._debug_helpers import open_store, simple_session, values


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = open_store(tmp_path / "run")
    yield s
    s.close()


def msgs(n: int, start: int = 0) -> list[dict[str, str]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"}
        for i in range(start, start + n)
    ]


def test_diff_of_a_fold_shows_the_summary_and_the_leaves_it_replaced(store: Store) -> None:
    s = store.create_session(name="f")
    s.append(msgs(10))
    before = s.checkpoint(kernel={"q": {"step": 1}, "run": [1, 2]})
    s.fold(2, 6, "the middle, summarised")
    after = s.checkpoint(kernel={"q": {"step": 2, "new": True}, "run": [1]})
    r = diff(store, str(before.id), str(after.id))
    assert r.common == 2 and r.removed == [] and r.added == []
    (fold,) = r.folds
    assert fold.position == 2 and fold.summary.kind == "summary"
    assert fold.summary.value["summary"] == "the middle, summarised"
    assert [p for p, _ in fold.replaced] == [2, 3, 4, 5]
    assert values([e for _, e in fold.replaced]) == msgs(4, 2)
    assert r.kernel == [
        JsonChange("added", "$.q.new", new=True),
        JsonChange("changed", "$.q.step", old=1, new=2),
        JsonChange("removed", "$.run[1]", old=2),
    ]
    assert r.working_memory == []
    # and back: the summary is removed, the leaves come back
    back = diff(store, str(after.id), str(before.id))
    assert values([e for _, e in back.added]) == msgs(4, 2)
    assert [e.kind for _, e in back.removed] == ["summary"]


def test_diff_of_a_fold_of_a_fold_and_across_sessions(store: Store) -> None:
    s = store.create_session(name="g")
    s.append(msgs(12))
    a = s.checkpoint()
    s.fold(0, 4, "inner")
    s.fold(0, 3, "outer")  # summary 'inner' + m4 + m5
    b = s.checkpoint()
    (fold,) = diff(store, str(a.id), str(b.id)).folds
    assert values([e for _, e in fold.replaced]) == msgs(6)
    child = s.fork(a)
    child.append(msgs(2, 100))
    child.checkpoint()
    r = diff(store, str(a.id), f"{child.uuid}@latest")
    assert r.removed == [] and values([e for _, e in r.added]) == msgs(2, 100)
    assert diff(store, str(a.id), str(a.id)).identical


def test_diff_refuses_other_archives_and_unknown_refs(store: Store, tmp_path: Path) -> None:
    s = simple_session(store, 2)
    other = tmp_path / "other.json"
    other.write_text("{}")
    with pytest.raises(UsageError, match="same archive"):
        diff(store, "s@1", str(other))
    with pytest.raises(UsageError, match="same archive"):
        diff(store, "../elsewhere/run:s@1", "s@2")
    with pytest.raises(NotFoundError):
        diff(store, "s@1", "s@99")
    with pytest.raises(NotFoundError):
        diff(store, "nobody@1", "s@1")
    assert s.info().turn == 2


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ({"a": 1}, {"a": 1}, []),
        (None, {"x": 1}, [JsonChange("added", "$", new={"x": 1})]),
        ({"x": 1}, None, [JsonChange("removed", "$", old={"x": 1})]),
        ({"a b": 1}, {"a b": 2}, [JsonChange("changed", '$["a b"]', old=1, new=2)]),
        ([1], [1, [2]], [JsonChange("added", "$[1]", new=[2])]),
        ({"a": 1}, {"a": "1"}, [JsonChange("changed", "$.a", old=1, new="1")]),
        ({"a": True}, {"a": 1}, [JsonChange("changed", "$.a", old=True, new=1)]),
    ],
)
def test_json_diff_table(a: Any, b: Any, expected: list[JsonChange]) -> None:
    assert json_diff(a, b) == expected


def test_expand_and_fork_expanded_recover_the_raw_leaves(store: Store) -> None:
    s = store.create_session(name="c")
    s.append(msgs(10))
    s.fold(1, 5, "first")
    s.fold(0, 3, "second")  # m0, summary(first), m5 -> summary
    ck = s.checkpoint(kernel={"k": 1})
    assert [e.kind for e in store.hydrate(ck)][:1] == ["summary"]
    assert values(expanded_history(store, ck)) == msgs(10)
    rows = expand_rows(store, ck)
    assert [len(r.summaries) for r in rows] == [1, 2, 2, 2, 2, 1, 0, 0, 0, 0]
    child = fork_expanded(store, ck, name="raw")
    info = child.info()
    assert info.parent == s.uuid and info.source_checkpoint == ck.id and info.turn == ck.turn
    assert values(child.history()) == msgs(10)
    last = child.checkpoints()[-1]
    assert last.trigger == "expand" and store.checkpoint_state(last)[0] == {"k": 1}
    assert values(s.history()) != msgs(10)


def test_log_replay_and_show_tell_what_happened(store: Store) -> None:
    s = simple_session(store, 6, name="h")
    s.backtrack(2, "use the other API")
    s.commit_turn([{"role": "assistant", "content": "switching"}])
    s.fold(0, 3, "early")
    s.checkpoint(label="folded")
    rows = changes(store, s)
    assert [c.summary for c in rows][:2] == ["+2", "+2"]
    assert rows[6].summary == "-4 +2" and rows[7].summary == "-3 +1 fold 3→1"
    assert [c.checkpoint.abandoned for c in rows] == [False] * 4 + [True, True, False, False]
    kinds = [t.kind for t in timeline(store, s)]
    assert kinds.index("backtrack") == 6 and kinds.count("fold") == 1
    steer = rows[6].added[0][1].value
    assert steer == {"role": "user", "content": "/steer use the other API"}
    shown = show(store, "h@3")
    assert shown.checkpoint.turn == 3 and len(shown.entries) == 6 and shown.kernel is None
