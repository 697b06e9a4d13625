"""A LangGraph thread's closed turns folded into ``lg_turns`` rows read back the same (0011).

A thread written with every step loose (as the saver writes today), its closed turns then folded
one row each (``_lgturns.fold``, what migration 0011 and the coming writer do): ``list`` (with
``before``, ``limit``, a metadata filter), ``get_tuple`` of every step with its pending writes,
``get_state_history`` and a fresh saver's reads give what they gave before; the thread goes on;
time travel from a folded step, and pending writes put on one, behave as on a twin thread whose
steps stay loose.
"""

from __future__ import annotations

import json
import re
import uuid
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")

from alpstore.integrations import _lgdb as lgdb
from alpstore.integrations import _lgfold as lgfold
from alpstore.integrations import _lgturns as lgturns
from alpstore.integrations._lgpack import id_bytes
from alpstore.integrations.langgraph import AlpstoreSaver
from alpstore.maintenance import verify
from tests.conftest import Backend
from tests.integrations import _lg_travel_graph as travel
from tests.integrations._framework_cli import ok, sqlite_url
from tests.integrations.test_langgraph_saver import build_graph, user

TURNS = 6


@pytest.fixture(autouse=True)
def _writer_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turns are folded by hand here (``_fold_closed_turns``), as 0011 folds them; the writer's
    own test turns it on."""
    monkeypatch.setattr(lgfold, "FOLD", False)


def _config(thread: str, checkpoint_id: str | None = None) -> Any:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _shape(t: Any) -> Any:
    return (t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)


def _fold_closed_turns(saver: AlpstoreSaver, thread: str) -> int:
    """Each turn before the thread's newest input step as one turn row (as 0011 folds)."""
    steps = list(saver.list(_config(thread)))
    inputs = sorted(
        id_bytes(t.checkpoint["id"]) for t in steps if t.metadata.get("source") == "input"
    )
    made = 0
    with saver.store.db.atomic() as conn:
        found = lgdb.find_thread(conn, thread, "")
        assert found is not None
        for start, below in pairwise(inputs):
            made += lgturns.fold(conn, found[0], start, below) is not None
    return made


def _turn_rows(saver: AlpstoreSaver) -> int:
    with saver.store.db.read() as conn:
        return int(conn.exec_driver_sql("SELECT count(*) FROM lg_turns").scalar_one())


def test_folded_turns_read_back_the_same(backend: Backend) -> None:
    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        graph = build_graph(saver)
        for n in range(TURNS):
            graph.invoke({"messages": [user(n)]}, _config("t"))
        before = [_shape(t) for t in saver.list(_config("t"))]
        ids = [s[0]["configurable"]["checkpoint_id"] for s in before]
        one_by_one = [_shape(saver.get_tuple(_config("t", i))) for i in ids]
        cursor = saver.list(_config("t"), before=_config("t", ids[3]), limit=4)
        paged = [_shape(t) for t in cursor]
        loops = [_shape(t) for t in saver.list(_config("t"), filter={"source": "loop"})]
        history = list(graph.get_state_history(_config("t")))
        assert _fold_closed_turns(saver, "t") == TURNS - 1
        assert _turn_rows(saver) == TURNS - 1
        assert [_shape(t) for t in saver.list(_config("t"))] == before
        assert [_shape(saver.get_tuple(_config("t", i))) for i in ids] == one_by_one
        cursor = saver.list(_config("t"), before=_config("t", ids[3]), limit=4)
        assert [_shape(t) for t in cursor] == paged
        assert [_shape(t) for t in saver.list(_config("t"), filter={"source": "loop"})] == loops
        assert list(graph.get_state_history(_config("t"))) == history
    with AlpstoreSaver.open(backend.root, url=backend.url) as again:  # nothing in memory
        assert [_shape(t) for t in again.list(_config("t"))] == before
        assert [_shape(again.get_tuple(_config("t", i))) for i in ids] == one_by_one
        graph = build_graph(again)
        graph.invoke({"messages": [user(TURNS)]}, _config("t"))  # and goes on
        assert len(list(again.list(_config("t")))) > len(before)
    assert verify(backend.open_store()).ok
    backend.close_all()


def test_time_travel_and_writes_on_a_folded_step_as_on_a_loose_one(backend: Backend) -> None:
    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        graph = build_graph(saver)
        for thread in ("loose", "folded"):
            for n in range(TURNS):
                graph.invoke({"messages": [user(n)]}, _config(thread))
        assert _fold_closed_turns(saver, "folded") == TURNS - 1
        results = {}
        for thread in ("loose", "folded"):
            old = [
                t
                for t in graph.get_state_history(_config(thread))
                if t.metadata and t.metadata.get("source") == "input"
            ][-3]  # the input step of the third turn: folded in "folded"
            forked = graph.update_state(old.config, {"messages": [user(90)]})
            graph.invoke(None, forked)
            resumed = [t for t in graph.get_state_history(_config(thread)) if t.next == ("agent",)][
                -2
            ]
            graph.invoke(None, resumed.config)  # a run resumed from an old step: its writes
            state = graph.get_state(_config(thread))
            results[thread] = (
                [m.content for m in state.values["messages"]],
                len(list(graph.get_state_history(_config(thread)))),
                [len(t.pending_writes) for t in saver.list(_config(thread))],
            )
        assert results["folded"] == results["loose"]
    assert verify(backend.open_store()).ok
    backend.close_all()


def _unfold_all(saver: AlpstoreSaver, thread: str) -> int:
    with saver.store.db.atomic() as conn:
        found = lgdb.find_thread(conn, thread, "")
        assert found is not None
        return lgturns.unfold_all(conn, found[0])


def test_the_writer_folds_each_closed_turn_off_the_callers_thread(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lgfold, "FOLD", True)
    monkeypatch.setattr(lgfold, "FOLD_ON_POSTGRESQL", True)  # the writer tested on both
    monkeypatch.setattr(lgfold, "EVERY_ON_POSTGRESQL", 1)  # every turn, as on SQLite
    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        graph = build_graph(saver)
        for n in range(TURNS):
            graph.invoke({"messages": [user(n)]}, _config("t"))
        saver._folder.wait()
        assert saver._folder.error is None
        assert saver._folder.folded == _turn_rows(saver) == TURNS - 1
        with saver.store.db.read() as conn:  # the open turn's steps only stay loose
            loose = conn.exec_driver_sql("SELECT count(*) FROM lg_checkpoints").scalar_one()
        steps = list(saver.list(_config("t")))
        assert int(loose) < len(steps) // 2
        folded = [_shape(t) for t in steps]
        state = graph.get_state(_config("t"))
        assert _unfold_all(saver, "t") == TURNS - 1  # loose again: the same reads
        assert [_shape(t) for t in saver.list(_config("t"))] == folded
        assert graph.get_state(_config("t")) == state
    assert verify(backend.open_store()).ok
    backend.close_all()


def test_maintenance_on_folded_turns_as_on_loose_ones(backend: Backend) -> None:
    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        graph = build_graph(saver)
        runs: dict[str, list[str]] = {}
        for thread in ("loose", "folded", "loose-2", "folded-2"):
            for n in range(TURNS):
                run = str(uuid.uuid4())
                runs.setdefault(thread, []).append(run)
                graph.invoke(
                    {"messages": [user(n)]}, {**_config(thread), "metadata": {"run_id": run}}
                )
        for thread in ("folded", "folded-2"):
            assert _fold_closed_turns(saver, thread) == TURNS - 1
        results = {}
        for a, b in (("loose", "loose-2"), ("folded", "folded-2")):
            saver.copy_thread(a, f"{a}-copy")
            copied = [_shape(t)[1:3] for t in saver.list(_config(f"{a}-copy"))]
            original = [_shape(t)[1:3] for t in saver.list(_config(a))]
            saver.delete_for_runs([runs[a][2], runs[a][-1]])
            after_runs = len(list(saver.list(_config(a))))
            saver.prune([b], strategy="keep_latest")
            pruned = len(list(saver.list(_config(b))))
            assert after_runs < len(original) and pruned == 1  # each call did something
            saver.delete_thread(a)
            results[a] = (
                [c[1] for c in copied] == [o[1] for o in original],
                len(copied),
                after_runs,
                pruned,
                list(saver.list(_config(a))),
            )
        assert results["folded"] == results["loose"]
    with AlpstoreSaver.open(backend.root, url=backend.url) as again:
        assert _turn_rows(again) == 0 or all(
            list(again.list(_config(t))) != [] for t in ("folded-copy",)
        )
    assert verify(backend.open_store()).ok
    backend.close_all()


def test_a_thread_with_folded_turns_exports_and_imports_whole(tmp_path: Path) -> None:
    """``session export`` of a thread whose closed turns are turn rows writes every step and
    pending write (the import, on another run root, gives the same reads as the source)."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    urls = (sqlite_url(src), sqlite_url(dst))
    with AlpstoreSaver.open(src, url=urls[0]) as saver:
        graph = build_graph(saver)
        for n in range(TURNS):
            graph.invoke({"messages": [user(n)]}, _config("t"))
        before = [_shape(t) for t in saver.list(_config("t"))]
        assert _fold_closed_turns(saver, "t") == TURNS - 1
    out = tmp_path / "t.jsonl.zst"
    ok(src, urls[0], "session", "export", "langgraph:t", "-o", str(out))
    ok(dst, urls[1], "session", "import", str(out))
    with AlpstoreSaver.open(dst, url=urls[1]) as moved:
        assert [_shape(t) for t in moved.list(_config("t"))] == before


def _scripted(root: Path, fold: bool) -> str:
    url = sqlite_url(root)
    with AlpstoreSaver.open(root, url=url) as saver:
        travel.run_script(travel.build_graph(saver))
        if fold:
            assert _fold_closed_turns(saver, travel.THREAD) >= 1
    return url


def test_session_log_backtrack_and_fork_of_a_thread_with_folded_turns(tmp_path: Path) -> None:
    """The reading commands and issue 40's backtrack and fork see a folded step as a loose one:
    the same ``session log`` (every step's checkpoint_id, node, pending writes), a step found by
    its LangGraph checkpoint_id, and the same messages after ``backtrack`` / ``fork`` to one."""
    out = {}
    for fold in (False, True):
        root = tmp_path / ("folded" if fold else "loose") / str(len(out))
        url = _scripted(root, fold)
        log = json.loads(ok(root, url, "session", "log", travel.THREAD, "--json"))
        ids = {r["step"]: r["checkpoint_id"] for r in log if r.get("checkpoint_id")}
        target = ids["langgraph:t1@1.4"]  # by its LangGraph checkpoint_id: resolve_checkpoint
        ok(root, url, "session", "backtrack", "langgraph:t1", "--to", target, "check", "twice")
        shown = ok(root, url, "session", "show", travel.THREAD, "--json")
        doc = json.loads(ok(root, url, "session", "fork", "t1@1.2", "--json"))
        with AlpstoreSaver.open(root, url=url) as saver:
            graph = travel.build_graph(saver)
            now = travel.messages(graph.get_state(travel.config()).values)
            forked = travel.messages(graph.get_state(travel.config(doc["framework_id"])).values)
        strip = [{k: v for k, v in r.items() if k not in ("checkpoint_id", "at")} for r in log]
        out[len(out)] = (strip, len(ids), json.loads(shown), now, forked)
    assert _no_ids(out[1]) == _no_ids(out[0])


def _no_ids(value: Any) -> str:
    """``value`` as JSON, uuids (of subgraph namespaces, sessions: random in every run), their
    prefixes and the digests of what names them left out."""
    text = json.dumps(value, sort_keys=True, default=str)
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "UUID", text)
    text = re.sub(r"[0-9a-f]{64}", "DIGEST", text)  # of messages naming them
    return re.sub(r"\(session [0-9a-f]{8}\)", "(session)", text)


def test_the_newest_step_left_after_a_delete_is_read_when_it_was_folded(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``delete_for_runs`` of a thread's last run leaves a folded step newest: the turn row
    holding it is unfolded (the newest-step reads look at loose rows only). The differential
    machine found it on PostgreSQL (get_tuple gave None)."""
    monkeypatch.setattr(lgfold, "FOLD", True)
    monkeypatch.setattr(lgfold, "FOLD_ON_POSTGRESQL", True)  # the writer tested on both
    monkeypatch.setattr(lgfold, "EVERY_ON_POSTGRESQL", 1)  # every turn, as on SQLite
    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        graph = build_graph(saver)
        runs = [str(uuid.uuid4()) for _ in range(3)]
        for n, run in enumerate(runs):
            graph.invoke({"messages": [user(n)]}, {**_config("t"), "metadata": {"run_id": run}})
        saver._folder.wait()
        assert _turn_rows(saver) == 2
        saver.delete_for_runs([runs[-1]])
        steps = list(saver.list(_config("t")))
        newest = saver.get_tuple(_config("t"))
        assert newest is not None and _shape(newest) == _shape(steps[0])
        graph.invoke({"messages": [user(9)]}, _config("t"))  # and goes on from it
        assert len(list(saver.list(_config("t")))) > len(steps)


def test_a_list_with_a_limit_reads_only_the_newest_turn_rows(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``list(limit=n)`` (``get_state_history`` with a limit) gives the first ``n`` of the whole
    list, and decodes the newest turn rows only, not every turn of the thread."""
    from alpstore.integrations import _lgturnread as turnread

    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        graph = build_graph(saver)
        for n in range(3 * TURNS):
            graph.invoke({"messages": [user(n)]}, _config("t"))
        assert _fold_closed_turns(saver, "t") == 3 * TURNS - 1
        whole = [_shape(t) for t in saver.list(_config("t"))]
        ids = [s[0]["configurable"]["checkpoint_id"] for s in whole]
        decoded: list[int] = []
        real = turnread._turn

        def counted(conn: Any, row: Any) -> Any:
            decoded.append(int(row[0]))
            return real(conn, row)

        monkeypatch.setattr(turnread, "_turn", counted)
        for limit in (1, 5, 12, 40):
            decoded.clear()
            assert [_shape(t) for t in saver.list(_config("t"), limit=limit)] == whole[:limit]
            if limit <= 5:  # the newest 8 turn rows, then one decode per folded step handed
                # out (its writes); all 17 before, and more
                assert len(decoded) <= 8 + limit, (limit, len(decoded))
        page = saver.list(_config("t"), before=_config("t", ids[20]), limit=9)
        assert [_shape(t) for t in page] == whole[21:30]
        loops = [t for t in whole if t[2].get("source") == "loop"]
        assert [
            _shape(t) for t in saver.list(_config("t"), filter={"source": "loop"}, limit=7)
        ] == loops[:7]
    backend.close_all()


def test_a_fold_asked_for_before_the_thread_changed_takes_nothing(backend: Backend) -> None:
    """A fold runs after its input's put, on the folding thread: if the thread was deleted and
    copied over meanwhile, every step of the new one may lie below that input. The fold then
    does nothing (the input is no loose step of the thread any more); it used to fold the new
    thread's newest step, and the thread's latest read None (the differential machine, text
    ids, found it about one run in two)."""
    with AlpstoreSaver.open(backend.root, url=backend.url) as saver:
        graph = build_graph(saver)
        for n in range(2):
            graph.invoke({"messages": [user(n)]}, _config("src"))
        for n in range(3):
            graph.invoke({"messages": [user(n)]}, _config("t"))
        stale = max(
            (
                t.checkpoint["id"]
                for t in saver.list(_config("t"))
                if t.metadata.get("source") == "input"
            ),
            key=id_bytes,
        )
        saver.delete_thread("t")
        saver.copy_thread("src", "t")  # every step of the new "t" lies below the stale input
        want = saver.get_tuple(_config("t"))
        assert want is not None
        folder = lgfold.Folder(saver.store)
        folder._fold("t", "", stale)  # the job as the folding thread would run it, late
        assert folder.folded == 0 and _turn_rows(saver) == 0
        got = saver.get_tuple(_config("t"))
        assert got is not None and _shape(got) == _shape(want)
    assert verify(backend.open_store()).ok
    backend.close_all()
