"""Issue 39 "done when": a fuzz test over session-file structure. Hypothesis changes a genuine
export's ids, references, parent claim, name, summary nesting, event count and steering value
(and re-seals it, so the digest is no obstacle); whatever the import accepts never makes a later
command fail with anything but a named error (the CLI's exit 70 is an exception that is not an
``AlpstoreError``) and never changes another session of the archive.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import blake3
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from alpstore.archive.base import summary_document
from alpstore.codec import canonical_json
from alpstore.debug.history import timeline
from alpstore.debug.lineage import backtracks_of
from alpstore.errors import AlpstoreError
from alpstore.maintenance import verify
from alpstore.portable.deep import snapshot_of_head
from alpstore.portable.exporting import write_export
from alpstore.portable.travel import check_session_file
from alpstore.portable.travel_export import export_session
from alpstore.portable.travel_import import import_session_file
from alpstore.store import Store
from tests.conftest import run_cli
from tests.portable.test_hostile_bundles import blob_line, other_session, read, seal, source_file

MAX_INT = 2**31 - 1
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
IDS = st.sampled_from(["keep", "fresh", "fresh", "huge", "low", "taken", "zero-gap"])
REF = st.one_of(
    st.none(),
    st.builds(lambda i: {"id": i}, st.sampled_from([1, 2, 3, 50, 2**30, MAX_INT])),
    st.builds(lambda q: {"seq": q}, st.integers(1, 9)),
    st.just("keep"),
)
PARENT = st.sampled_from(["none", "victim-null", "victim-wrong", "victim-right", "elsewhere"])
NAME = st.one_of(
    st.none(),
    st.sampled_from(["src", "victim", "caf\u00e9", "cafe\u0301", "x" * 250, "a\x1bb"]),
    st.text(max_size=12),
)


def _state(store: Store, uuid: str) -> Any:
    s = store.get_session(uuid)
    info = s.info()
    return (
        info,
        [(c.id, c.seq, c.covering_digest) for c in s.checkpoints(include_abandoned=True)],
        [e.hex for e in s.history()],
        store.session_backtracks(s.id),
        store.session_events(s.id),
        export_session(store, s.id, None).digest,
    )


def _mutate(
    recs: list[dict[str, Any]],
    victim: dict[str, Any],
    *,
    ids: str,
    refs: list[Any],
    parent: str,
    name: Any,
    depth: int,
    events: int,
    steering: Any,
) -> list[dict[str, Any]]:
    recs = copy.deepcopy(recs)
    cks = [r for r in recs if r.get("type") == "checkpoint"]
    base = {"keep": 1, "fresh": 100, "huge": MAX_INT - 20, "low": 1, "taken": victim["ck"]}.get(
        ids, 3
    )
    for k, r in enumerate(cks):
        r["id"] = base + k if ids != "keep" else r["id"]
    for r in recs:
        if r.get("type") == "backtrack" and ids == "huge":
            r["id"] = MAX_INT - 1
    linked = [r for r in recs if r.get("type") in ("backtrack", "event")]
    for r, ref in zip(linked, refs, strict=False):
        if ref == "keep":
            continue
        key = "to" if r["type"] == "backtrack" else "checkpoint"
        r[key] = ref
    session = next(r for r in recs if r.get("type") == "session")
    session["name"] = name
    session["parent"] = {
        "none": None,
        "victim-null": {"session": victim["uuid"], "seq": 1, "covering": None},
        "victim-wrong": {"session": victim["uuid"], "seq": 1, "covering": "cd" * 32},
        "victim-right": {"session": victim["uuid"], "seq": 1, "covering": victim["cover"]},
        "elsewhere": {"session": "nowhere", "seq": 1, "covering": None},
    }[parent]
    at = recs.index(session)
    if depth:  # a chain of summaries `depth` deep, added to the head
        chain: list[dict[str, Any]] = []
        top = blob_line({"role": "user", "content": "deep"})
        chain.append(top)
        for i in range(depth):
            msg = blob_line({"role": "user", "content": f"m{i}"})
            value = summary_document(
                f"s{i}", [bytes.fromhex(top["digest"]), bytes.fromhex(msg["digest"])]
            )
            top = {
                "type": "blob",
                "digest": blake3.blake3(canonical_json(value)).hexdigest(),
                "kind": "summary",
                "value": value,
            }
            chain += [msg, top]
        recs[at:at] = chain
        head = next(r for r in recs if r.get("type") == "head")
        head["add"] = [*head["add"], top["digest"]]
    if steering is not None:
        blob = blob_line(steering)
        recs.insert(1, blob)
        for r in recs:
            if r.get("type") == "backtrack":
                r["steering"] = blob["digest"]
    event = next((r for r in recs if r.get("type") == "event"), None)
    if event is not None and events:
        where = recs.index(event)
        recs[where:where] = [dict(event) for _ in range(events)]
    return recs


def _later_commands(store: Store, uuid: str, tmp: Path) -> None:
    """What `session log|show|export|digest`, `debug log|replay`, `checkpoint export` and
    `archive verify` do, in process: only named errors."""
    s = store.get_session(uuid)
    for c in s.checkpoints(include_abandoned=True):
        store.hydrate(c)
        store.resolve_checkpoint(str(c.id))
    list(s.history())
    store.session_backtracks(s.id)
    store.session_events(s.id)
    backtracks_of(store, [s.id])
    timeline(store, s)
    export_session(store, s.id, tmp / "again.session.jsonl", overwrite=True)
    check_session_file(tmp / "again.session.jsonl")
    write_export(store, snapshot_of_head(store, s), tmp / "again.json", overwrite=True)
    assert verify(store).ok


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return read(source_file(tmp_path_factory.mktemp("fuzzsrc")))


@pytest.mark.slow
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    ids=IDS,
    refs=st.lists(REF, max_size=3),
    parent=PARENT,
    name=NAME,
    depth=st.sampled_from([0, 0, 3, 80]),
    events=st.sampled_from([0, 5, 600, 2000]),
    steering=st.one_of(st.none(), JSON),
)
def test_an_accepted_bundle_breaks_nothing(
    tmp_path_factory: pytest.TempPathFactory,
    base: list[dict[str, Any]],
    ids: str,
    refs: list[Any],
    parent: str,
    name: Any,
    depth: int,
    events: int,
    steering: Any,
) -> None:
    tmp = tmp_path_factory.mktemp("fuzz")
    with Store.open(tmp / "root") as store:
        victim = other_session(store, "victim")
        first = victim.checkpoints()[0]
        info = {
            "uuid": victim.uuid,
            "ck": first.id,
            "cover": first.covering_digest.hex() if first.covering_digest else None,
        }
        before = _state(store, victim.uuid)
        recs = _mutate(
            base, info, ids=ids, refs=refs, parent=parent, name=name, depth=depth,
            events=events, steering=steering,
        )  # fmt: skip
        path = seal(recs, tmp / "f.session.jsonl")
        try:
            done = import_session_file(store, path)
        except AlpstoreError as err:
            event(f"refused: {err.message.split(': ')[-1][:40]}")
            assert _state(store, victim.uuid) == before
            return
        event(f"accepted (ids kept: {done.ids_kept}, parent: {done.parent is not None})")
        _later_commands(store, done.session, tmp)
        assert _state(store, victim.uuid) == before
        fresh = other_session(store, "after")  # this archive goes on numbering as before
        assert max(c.id for c in fresh.checkpoints()) < 2**30
    for args in (("session", "log", done.session), ("debug", "replay", done.session)):
        r = run_cli("--root", str(tmp / "root"), *args)
        assert r.code != 70 and "Traceback" not in r.err, (args, r.err)
