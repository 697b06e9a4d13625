"""The live backtrack API (AR-5): an in-process context, copy-on-write retargets, and a
backtrack that reaches the archive at the next write — never half-way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alpstore.errors import SessionStateError
from alpstore.live import MAX_CONTEXT_DEPTH, Context, model_message
from alpstore.maintenance import verify
from alpstore.store import Store

# ------------------------------------------------------------------ Context (in memory)

ops = st.lists(
    st.one_of(
        st.tuples(st.just("extend"), st.integers(0, 4), st.integers(0, 5)),
        st.tuples(st.just("prefix"), st.integers(0, 4), st.integers(0, 60)),
    ),
    max_size=60,
)


@given(ops)
def test_context_behaves_like_immutable_lists(steps: list[tuple[str, int, int]]) -> None:
    """Any mix of prefixes and extends, from any earlier context, equals the same on lists:
    extending one context never changes another (the shared segment grows only at its tip).
    """
    contexts: list[Context] = [Context()]
    models: list[list[int]] = [[]]
    counter = 0
    for op, pick, n in steps:
        i = pick % len(contexts)
        if op == "extend":
            values = list(range(counter, counter + n))
            counter += n
            contexts.append(contexts[i].extend(values))
            models.append(models[i] + values)
        else:
            k = n % (len(models[i]) + 1)
            contexts.append(contexts[i].prefix(k))
            models.append(models[i][:k])
        for ctx, model in zip(contexts, models, strict=True):
            assert list(ctx) == model and len(ctx) == len(model)
    for ctx, model in zip(contexts, models, strict=True):
        assert [ctx[j] for j in range(len(ctx))] == model
        if model:
            assert ctx[-1] == model[-1] and ctx[1:] == model[1:]


def test_context_chain_depth_is_bounded() -> None:
    ctx = Context.of([0])
    model = [0]
    for i in range(1, 5 * MAX_CONTEXT_DEPTH):
        ctx = ctx.prefix(len(ctx) - 1).extend([i, i]) if i % 2 else ctx.extend([i])
        model = [*model[:-1], i, i] if i % 2 else [*model, i]
    assert list(ctx) == model
    depth, seg = 0, ctx._seg
    while seg is not None:
        depth, seg = depth + 1, seg.parent
    assert depth <= MAX_CONTEXT_DEPTH
    with pytest.raises(IndexError):
        ctx[len(model)]


# ------------------------------------------------------------------ live sessions


def agent(checkpoint: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "Agent", "metadata": {"name": "live"}, "spec": {"checkpoint": checkpoint}}


def turn(i: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]


def contents(values: Any) -> list[str]:
    return [v["content"] for v in values]


def test_backtrack_is_in_hand_now_and_in_the_archive_at_the_next_write(tmp_path: Path) -> None:
    with Store.open(tmp_path / "run") as store:
        live = store.open_session(
            manifest=agent({"mode": "every_turn", "storage": "hybrid"}), cwd=tmp_path
        )
        assert len(live.context) == 0  # hydrated once, then kept in step with every write
        for i in range(4):
            live.commit_turn(turn(i))
        before = live.context
        bt = live.backtrack(2, "try the other file")
        assert contents(bt.context) == [
            *contents(turn(0)),
            *contents(turn(1)),
            "/steer try the other file",
        ]
        assert bt.context is live.context and bt.target.turn == 2
        assert contents(before)[-1] == "a3"  # the old context is unchanged (copy-on-write)
        assert bt.context[0] is before[0]  # and no message was copied
        # not yet in the archive: the head and every checkpoint are as before
        assert len(live.session.history()) == 8 and store.session_backtracks(live.session.id) == []
        assert live.pending_backtracks == 1
        live.commit_turn(turn(5))
        assert live.pending_backtracks == 0
        history = [e.value["content"] for e in live.session.history()]
        assert history == [*contents(live.context)]
        assert history[-3:] == ["/steer try the other file", "q5", "a5"]
        (recorded,) = store.session_backtracks(live.session.id)
        assert recorded["steps"] == 2 and recorded["steering"] == "/steer try the other file"
        assert [
            (c.turn, c.abandoned) for c in live.session.checkpoints(include_abandoned=True)
        ] == [
            (1, False),
            (2, False),
            (3, True),
            (4, True),
            (4, False),
        ]


def test_a_crash_before_the_next_write_keeps_the_archive_as_it_was(tmp_path: Path) -> None:
    root = tmp_path / "run"
    with Store.open(root) as store:
        live = store.open_session(manifest=agent({"mode": "every_turn"}), cwd=tmp_path)
        for i in range(3):
            live.commit_turn(turn(i))
        live.backtrack(1, "never persisted")
        uuid = live.uuid
    # the process "dies" here: no flush, no further write
    with Store.open(root) as store:
        session = store.get_session(uuid)
        assert [e.value["content"] for e in session.history()] == contents(
            [m for i in range(3) for m in turn(i)]
        )
        assert len(session.checkpoints()) == 3 and store.session_backtracks(session.id) == []
        assert len(list((tmp_path / ".mas" / "checkpoints").glob("*.json"))) == 3


def test_in_memory_backtrack_persists_as_a_head_move(tmp_path: Path) -> None:
    with Store.open(tmp_path / "run") as store:
        live = store.open_session(manifest=agent({"mode": "in_memory"}), cwd=tmp_path)
        for i in range(3):
            live.commit_turn(turn(i))
        live.backtrack(2)
        live.flush()
        assert [e.value["content"] for e in live.session.history()] == contents(turn(0))
        (event,) = [e for e in store.session_events(live.session.id) if e["kind"] == "backtrack"]
        assert event["detail"]["in_memory"] and event["detail"]["to_turn"] == 1
        assert live.session.checkpoints() == []


def test_in_memory_backtrack_reuses_the_digest_it_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backtrack to an in-process checkpoint moves the head without reading every entry of
    the target view to recompute its covering digest (the mark kept it), and the digest it
    records is the true one.
    """
    with Store.open(tmp_path / "run") as store:
        live = store.open_session(manifest=agent({"mode": "in_memory"}), cwd=tmp_path)
        for i in range(4):
            live.commit_turn(turn(i))
        assert all(mark.cover is not None for mark in live.marks)
        computed: list[Any] = []
        real = store.views.cover
        monkeypatch.setattr(
            store.views, "cover", lambda conn, view: computed.append(view) or real(conn, view)
        )
        live.backtrack(2, "steer")
        live.commit_turn(turn(9))
        assert computed == []
        monkeypatch.undo()
        assert verify(store).ok


def test_another_writer_moving_the_head_is_refused_not_overwritten(tmp_path: Path) -> None:
    with Store.open(tmp_path / "run") as store:
        live = store.open_session(manifest=agent({"mode": "in_memory"}), cwd=tmp_path)
        for i in range(3):
            live.commit_turn(turn(i))
        live.backtrack(1, "mine")
        store.get_session(live.uuid).append([{"role": "user", "content": "someone else"}])
        with pytest.raises(SessionStateError, match="another writer"):
            live.commit_turn(turn(7))
        history = [e.value["content"] for e in store.get_session(live.uuid).history()]
        assert history[-1] == "someone else" and "q7" not in history


def test_backtrack_needs_enough_checkpoints(tmp_path: Path) -> None:
    with Store.open(tmp_path / "run") as store:
        live = store.open_session(manifest=agent({"mode": "none"}), cwd=tmp_path)
        live.commit_turn(turn(0))
        with pytest.raises(SessionStateError, match="only 0 checkpoint"):
            live.backtrack(1)
        live.checkpoint()
        live.commit_turn(turn(1))
        live.checkpoint()
        assert contents(live.backtrack(1).context) == contents(turn(0))


live_steps = st.lists(
    st.one_of(
        st.tuples(st.just("turn"), st.integers(1, 3)),
        st.tuples(st.just("backtrack"), st.integers(1, 3)),
        st.tuples(st.just("flush"), st.just(0)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=15)
@given(live_steps, st.sampled_from(["in_memory", "every_turn"]))
def test_live_context_always_equals_the_archive_after_flush(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int]], mode: str
) -> None:
    """Any mix of turns, backtracks (with and without steering) and flushes: the context in
    hand is what the archive holds once the backtracks are persisted.
    """
    root = tmp_path_factory.mktemp("live")
    spec: dict[str, Any] = {"mode": mode}
    if mode == "every_turn":
        spec["storage"] = "hybrid"
        spec["portability"] = "reference"
    with Store.open(root / "run") as store:
        workspace = root / "ws"
        workspace.mkdir()
        (workspace / "config.yaml").write_text("mas_ctl: {archive: {enabled: true}}\n")
        live = store.open_session(manifest=agent(spec), cwd=workspace)
        counter = 0
        for op, n in steps:
            if op == "turn":
                for _ in range(n):
                    counter += 1
                    live.commit_turn(turn(counter))
            elif op == "backtrack" and n < len(live.marks):
                live.backtrack(n, f"steer {counter}" if counter % 2 else None)
            elif op == "flush":
                live.flush()
        live.flush()
        archived = [model_message(e) for e in live.session.history()]
        assert archived == live.context.to_list()
        assert live.turn == live.session.info().turn
        assert verify(store).ok  # every recorded covering digest is the true one
        assert not list(workspace.rglob("*.json"))  # reference portability: rows, no files
