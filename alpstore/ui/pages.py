"""One handler per page: read the request's parameters, ask :mod:`alpstore.ui.queries` (or the
library) for the data, return the template's context. No HTML here, no writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from alpstore.continuity.checkpoint import SECTIONS
from alpstore.continuity.journal import reduce, replay
from alpstore.continuity.paths import EXECUTION_ID_PATTERN, ExecutionPaths
from alpstore.continuity.render import TITLES, render
from alpstore.continuity.status import _inspect_checkpoint
from alpstore.db.info import describe
from alpstore.debug.bisect import bisect as run_bisect
from alpstore.debug.bisect import grep_predicate
from alpstore.errors import ContinuityError, NotFoundError, UsageError
from alpstore.maintenance import verify
from alpstore.rules.ids import is_number
from alpstore.store import MAX_SQL_INTEGER
from alpstore.ui import diffs, queries
from alpstore.ui.present import bytes_chart, size, visible, when

if TYPE_CHECKING:
    from starlette.requests import Request

    from alpstore.sessions import CheckpointInfo, Session
    from alpstore.store import Store
    from alpstore.ui.settings import Settings

MAX_GREP = 500
"""Longest regular expression a bisect request may carry."""


def _int(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    if len(raw) > 40 or not is_number(raw.removeprefix("-")):  # ASCII digits only
        raise UsageError(f"parameter {name}={raw[:40]!r}: expected a whole number")
    value = int(raw)
    if abs(value) > MAX_SQL_INTEGER:  # the database could not even compare it
        raise UsageError(f"parameter {name}={raw[:40]!r}: out of range")
    return value


def _session(store: Store, ref: str) -> Session:
    """The session ``ref`` names. No id or name holds a NUL (PostgreSQL refuses one in any
    text it is asked to compare), so a reference with one finds nothing on either backend.
    """
    if "\x00" in ref:
        raise NotFoundError(f"no session {ref!r} in this archive")
    return store.get_session(ref)


def _checkpoint(store: Store, ref: str) -> CheckpointInfo:
    """The checkpoint ``ref`` names: an id, SESSION@TURN or SESSION@latest (NUL: as above)."""
    if "\x00" in ref:
        raise NotFoundError(f"checkpoint {ref!r}: no such checkpoint")
    return store.resolve_checkpoint(ref)


def _names(
    settings: Settings, *cks: CheckpointInfo | None, more: tuple[str, ...] = ()
) -> dict[str, str]:
    """Names of the sessions these checkpoints belong to (and ``more``): what the page shows,
    in one query, never every session of the archive.
    """
    uuids = {ck.session for ck in cks if ck is not None} | set(more)
    return queries.session_names(settings.store, uuids)


def ref(names: dict[str, str], ck: CheckpointInfo) -> str:
    """``name@turn`` of a checkpoint."""
    return f"{names.get(ck.session, ck.session[:8])}@{ck.turn}"


def sessions(request: Request, settings: Settings) -> dict[str, Any]:
    """Sessions: the lineage tree, or the sessions matching ``q``."""
    store = settings.store
    q = request.query_params.get("q", "")
    found, matches = queries.search_sessions(store, q) if q.strip() else (None, 0)
    page = queries.sessions_page(store, _int(request, "page")) if found is None else None
    count = page.total if page is not None else store.count_sessions()
    return {"q": q, "found": found, "matches": matches, "tree": page, "count": count}


def timeline(request: Request, settings: Settings) -> dict[str, Any]:
    """A page of one session's timeline with its markers and chart."""
    store = settings.store
    session = _session(store, request.path_params["ref"])
    info = session.info()
    page = queries.timeline_page(store, info, _int(request, "page"))
    children = queries.fork_children(store, info)
    parent_ck = None
    if info.source_checkpoint is not None:
        parent_ck = store.get_checkpoint(info.source_checkpoint)
    chart = bytes_chart([(r.checkpoint.id, r.checkpoint.turn, r.bytes_added) for r in page.rows])
    last_seq = page.rows[-1].checkpoint.seq if page.rows else 0
    return {
        "info": info,
        "tl": page,
        "children": children,
        "parent_ck": parent_ck,
        "chart": chart,
        "last_seq": last_seq,
        "live": page.page == page.pages - 1,
        "names": _names(
            settings,
            parent_ck,
            more=(
                info.uuid,
                *(str(m.detail.get("child") or "") for r in page.rows for m in r.markers),
                *(str(m.detail.get("child") or "") for m in page.before),
            ),
        ),
        "ref": ref,
    }


def poll(request: Request, settings: Settings) -> dict[str, Any]:
    """The checkpoints after ``after`` (a live timeline asks every second)."""
    store = settings.store
    info = _session(store, request.path_params["ref"]).info()
    rows = queries.checkpoints_after(store, info, _int(request, "after") or 0)
    return {
        "rows": [
            {
                "seq": r.checkpoint.seq,
                "id": r.checkpoint.id,
                "turn": r.checkpoint.turn,
                # escaped as the page's template escapes them (ui.js sets them as text)
                "label": visible(r.checkpoint.label),
                "trigger": visible(r.checkpoint.trigger or "-"),
                "added": r.entries_added,
                "change": r.change,
                "bytes": size(r.bytes_added),
                "head": r.checkpoint.length,
                "cut": r.checkpoint.abandoned,
                "at": when(r.checkpoint.created_at),
                "href": f"/c/{r.checkpoint.id}",
                "markers": [visible(m.kind) for m in r.markers],
            }
            for r in rows
        ]
    }


def conversation(request: Request, settings: Settings) -> dict[str, Any]:
    """A window of the history at one checkpoint."""
    store = settings.store
    # through its text: an id beyond the database's integers is "no such checkpoint" too
    ck = store.resolve_checkpoint(str(request.path_params["ck"]))
    window = queries.conversation(store, ck, _int(request, "start"))
    return {
        "w": window,
        "ck": ck,
        "names": _names(settings, ck, window.previous),
        "ref": ref,
        "window": queries.CONVERSATION_WINDOW,
    }


def diff(request: Request, settings: Settings) -> dict[str, Any]:
    """Two checkpoints compared (``a``, ``b``: ids, SESSION@TURN or SESSION@latest)."""
    store = settings.store
    a_ref = request.query_params.get("a", "").strip()
    b_ref = request.query_params.get("b", "").strip()
    result = None
    if a_ref and b_ref:
        a = _checkpoint(store, a_ref)
        b = _checkpoint(store, b_ref)
        result = diffs.diff_page(store, a, b, _int(request, "page") or 0)
    return {
        "a_ref": a_ref,
        "b_ref": b_ref,
        "d": result,
        "names": _names(settings, *((result.a, result.b) if result is not None else ())),
        "ref": ref,
    }


def bisect(request: Request, settings: Settings) -> dict[str, Any]:
    """``debug bisect --grep`` over a session's retained checkpoints."""
    store = settings.store
    session = _session(store, request.path_params["ref"])
    pattern = request.query_params.get("grep", "")
    result = None
    if pattern:
        if len(pattern) > MAX_GREP:
            raise UsageError(f"--grep pattern is {len(pattern)} characters; at most {MAX_GREP}")
        result = run_bisect(store, session, grep_predicate(pattern))
    from alpstore.debug import lgsteps

    info = session.info()
    spell = ref
    if lgsteps.is_thread(info.name):  # several steps a turn: SESSION@TURN.STEP tells them apart

        def spell(names: dict[str, str], ck: CheckpointInfo) -> str:
            return f"{ref(names, ck)}.{lgsteps.step_of(store, ck)}"

    return {
        "info": info,
        "grep": pattern,
        "r": result,
        "names": _names(settings, more=(session.uuid,)),
        "ref": spell,
    }


def archive(request: Request, settings: Settings) -> dict[str, Any]:
    """Blob counts and sizes, tables, dictionaries; ``verify=1`` runs ``archive verify``."""
    store = settings.store
    report = verify(store) if request.query_params.get("verify") == "1" else None
    return {
        "stats": store.archive.stats(),
        "db": describe(store.db),
        "dicts": queries.dictionaries(store),
        "report": report,
    }


def continuity(request: Request, settings: Settings) -> dict[str, Any]:
    """Executions under ALP_HOME; for one: pins, the render preview and the journal's status.

    Read-only: unlike ``context status`` it never rotates the journal.
    """
    home = settings.alp_home
    executions: list[str] = []
    if home is not None and (home / "executions").is_dir():
        executions = sorted(
            p.name
            for p in (home / "executions").iterdir()
            if p.is_dir() and EXECUTION_ID_PATTERN.fullmatch(p.name)
        )
    chosen = request.query_params.get("execution", "")
    detail: dict[str, Any] | None = None
    if chosen and home is not None:
        try:
            paths = ExecutionPaths.of(home, chosen)
        except ContinuityError as err:
            raise UsageError(err.message, hint=err.hint) from None
        checkpoint, state, problem, nbytes = _inspect_checkpoint(paths)
        journal = replay(paths)
        reduction = reduce(journal.events)
        detail = {
            "id": chosen,
            "state": state,
            "problem": problem,
            "bytes": nbytes,
            "checkpoint": checkpoint,
            "sections": [
                (TITLES[name], checkpoint.pins(name)) for name in SECTIONS if checkpoint is not None
            ],
            "render": render(checkpoint) if checkpoint is not None else None,
            "journal": {
                "events": len(journal.events),
                "dropped": journal.dropped_lines,
                "generation": reduction.generation,
                "pending": reduction.pending,
                "last": reduction.last_completed,
                "duplicates": reduction.duplicates,
            },
        }
    return {"home": home, "executions": executions, "detail": detail}


def thread(request: Request, settings: Settings) -> dict[str, Any]:
    """A LangGraph thread: its steps grouped by turn (node, spelling, marks), the branches
    (time travel), and at one step (``ck``; default: the head's latest) the conversation with
    its tool calls and the state's other channels as JSON.
    """
    import json

    from alpstore.debug import lgsteps

    store = settings.store
    session = _session(store, request.path_params["ref"])
    info = session.info()
    found = lgsteps.thread_of(store, session.id)
    if found is None:
        raise NotFoundError(f"session {info.uuid} holds no LangGraph thread")
    cks = session.checkpoints(include_abandoned=True)
    events = store.session_events(session.id)
    name = info.name or info.uuid
    steps = lgsteps.thread_steps(store, session.id, name, cks, events)
    by_id = {ck.id: ck for ck in cks}
    chosen = _int(request, "ck")
    if chosen is None:
        retained = [ck for ck in cks if not ck.abandoned]
        chosen = (retained or cks)[-1].id if cks else None
    if chosen is not None and chosen not in by_id:
        raise NotFoundError(f"checkpoint {chosen} is not a step of {name}")
    backtracks = store.session_backtracks(session.id)
    after = {int(bt["from_checkpoint"]): bt for bt in backtracks if bt["from_checkpoint"]}
    turns: list[tuple[int, list[Any]]] = []
    for one in cks:
        if not turns or turns[-1][0] != one.turn:
            turns.append((one.turn, []))
        turns[-1][1].append(one)
    ck = by_id[chosen] if chosen is not None else None
    window = queries.conversation(store, ck, None) if ck is not None else None
    channels: dict[str, Any] | str = "no step"
    if ck is not None:
        channels = queries.thread_channels(store, found, steps[ck.id].checkpoint_id, "messages")
    return {
        "info": info,
        "thread": found,
        "turns": turns,
        "steps": steps,
        "after": after,
        "branches": backtracks,
        "ck": ck,
        "w": window,
        "channels": channels,
        "channels_json": (
            json.dumps(channels, indent=2, ensure_ascii=False, sort_keys=True)
            if isinstance(channels, dict)
            else ""
        ),
        "names": _names(settings, more=(info.uuid,)),
        "ref": ref,
    }
