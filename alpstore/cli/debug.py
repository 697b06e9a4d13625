"""`alpstore debug`: reverse debugging over every-turn checkpoints (log, show, diff, replay,
bisect, expand).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any

import typer

from alpstore.cli._common import MAX_COUNT, echo_text, print_json, read_store
from alpstore.errors import UsageError

if TYPE_CHECKING:
    from alpstore.debug.diff import JsonChange
    from alpstore.debug.history import TimelineItem
    from alpstore.sessions import CheckpointInfo, Entry
    from alpstore.store import Store

app = typer.Typer(
    help="Reverse debugging: checkpoint log, show, diff, replay, bisect and expand.",
    no_args_is_help=True,
)

SessionArg = Annotated[str, typer.Argument(help="Session id, unique id prefix, or name.")]
CheckpointArg = Annotated[
    str,
    typer.Argument(metavar="CHECKPOINT", help="Checkpoint id, SESSION@TURN or SESSION@latest."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
WidthOpt = Annotated[
    int,
    typer.Option("--width", min=0, max=MAX_COUNT, help="Cut entry lines at this width (0: never)."),
]


@contextmanager
def _progress(label: str) -> Iterator[Callable[[int, int], None]]:
    """A Rich progress bar on stderr, only when stderr is a terminal (otherwise Rich, about
    0.15 s of imports, is not loaded at all).
    """
    if not sys.stderr.isatty():
        yield lambda done, total: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _namer(st: Store) -> Callable[[str], str]:
    @cache
    def name(uuid: str) -> str:
        return st.get_session(uuid).info(refresh=False).name or uuid

    return name


def _ref(st: Store, ck: CheckpointInfo) -> str:
    """How to name ``ck``: ``SESSION@TURN``, or for a LangGraph thread (several steps a
    turn) ``SESSION@TURN.STEP``.
    """
    from alpstore.debug import lgsteps

    name = _namer(st)(ck.session)
    if lgsteps.is_thread(name):
        return f"{name}@{ck.turn}.{lgsteps.step_of(st, ck)}"
    return f"{name}@{ck.turn}"


def _entry_doc(pos: int, e: Entry) -> dict[str, Any]:
    return {"position": pos, "digest": e.hex, "kind": e.kind, "value": e.value}


def _ck_doc(st: Store, ck: CheckpointInfo) -> dict[str, Any]:
    return {
        "checkpoint": ck.id,
        "session": ck.session,
        "ref": _ref(st, ck),
        "seq": ck.seq,
        "turn": ck.turn,
        "label": ck.label,
        "trigger": ck.trigger,
        "head_length": ck.length,
        "archive_view_id": ck.archive_view_id,
        "retained": not ck.abandoned,
        "created_at": _when(ck.created_at),
    }


@app.command("log")
def log(ctx: typer.Context, session: SessionArg, as_json: JsonOpt = False) -> None:
    """Every checkpoint (turn, label, trigger, head length, what changed), with backtracks and
    recorded decisions in the order they happened.
    """
    from alpstore.debug.history import timeline

    st = read_store(ctx, read_only=True)
    s = st.get_session(session)
    with _progress("reading checkpoints") as progress:
        items = timeline(st, s, progress=progress)
    if as_json:
        docs = []
        for it in items:
            if it.change is not None:
                c = it.change
                docs.append(
                    {
                        "type": "checkpoint",
                        **_ck_doc(st, c.checkpoint),
                        "added": len(c.delta.added),
                        "removed": len(c.delta.removed),
                        "folded": [n for _, _, n in c.folded],
                        "change": c.summary,
                    }
                )
            else:
                docs.append({"type": it.kind, **it.detail, "at": _when(it.at)})
        print_json(docs)
        return
    from alpstore.cli._table import CHECKPOINT_COLUMNS, Column, Kind, print_table

    print_table(
        [
            *CHECKPOINT_COLUMNS,
            Column("CHANGE", Kind.WRAP),
        ],
        (_log_row(it) for it in items),
    )


def _log_row(it: TimelineItem) -> list[object]:
    """One row of `debug log`: a checkpoint, or an event told in the CHANGE column."""
    if it.change is None:
        return ["", "", "", "", "", _event_text(it.kind, it.detail)]
    ck = it.change.checkpoint
    cut = " (cut by backtrack)" if ck.abandoned else ""
    return [ck.id, ck.turn, ck.label, ck.trigger or "-", ck.length, f"{it.change.summary}{cut}"]


def _event_text(kind: str, d: dict[str, Any]) -> str:
    if kind == "backtrack":
        auto = " (automatic)" if d["automatic"] else ""
        steer = f"; steering: {d['steering']}" if d.get("steering") else ""
        return f"↶ backtrack {d['steps']} step(s) to checkpoint {d['to_checkpoint']}{auto}{steer}"
    if kind == "recovery":
        return f"! recovery: {d.get('action')} ({d.get('reason')}) [{d.get('signature')}]"
    rest = {k: v for k, v in d.items() if k != "checkpoint" and v is not None}
    return f"• {kind}: {json.dumps(rest, ensure_ascii=False, sort_keys=True)}"


@app.command("show")
def show(
    ctx: typer.Context,
    checkpoint: CheckpointArg,
    as_json: JsonOpt = False,
    width: WidthOpt = 100,
    tail: Annotated[
        int, typer.Option("--tail", help="Only the last N entries (0: all).", min=0, max=MAX_COUNT)
    ] = 0,
) -> None:
    """One checkpoint in full: its row, kernel and working memory, and its hydrated history."""
    from alpstore.debug.entries import entry_line
    from alpstore.debug.history import show as show_checkpoint

    st = read_store(ctx, read_only=True)
    shown = show_checkpoint(st, checkpoint)
    ck = shown.checkpoint
    start = max(len(shown.entries) - tail, 0) if tail else 0
    if as_json:
        print_json(
            {
                **_ck_doc(st, ck),
                "kernel": shown.kernel,
                "working_memory": shown.working_memory,
                "entries": [_entry_doc(i, e) for i, e in enumerate(shown.entries) if i >= start],
            }
        )
        return
    state = "retained" if not ck.abandoned else "cut by a backtrack"
    echo_text(
        f"checkpoint {ck.id} = {_ref(st, ck)} ({ck.label}, trigger {ck.trigger or '-'}, {state})"
    )
    echo_text(f"session {ck.session}, view {ck.archive_view_id}, {ck.length} entries")
    for name, doc in (("kernel", shown.kernel), ("working memory", shown.working_memory)):
        text = json.dumps(doc, ensure_ascii=False, sort_keys=True) if doc is not None else "none"
        room = width - len(name) - 2
        echo_text(f"{name}: {text[: room - 1] + '…' if width and len(text) > room else text}")
    if start:
        echo_text(f"... {start} earlier entries")
    for i, e in enumerate(shown.entries):
        if i >= start:
            echo_text(entry_line(i, e, width))


def _change_doc(c: JsonChange) -> dict[str, Any]:
    return {"op": c.op, "path": c.path, "old": c.old, "new": c.new}


def dump(v: Any) -> str:
    """Compact JSON of a value, for one-line output."""
    return json.dumps(v, ensure_ascii=False, sort_keys=True)


def _change_line(c: JsonChange) -> str:
    if c.op == "added":
        return f"  + {c.path} = {dump(c.new)}"
    if c.op == "removed":
        return f"  - {c.path} (was {dump(c.old)})"
    return f"  ~ {c.path}: {dump(c.old)} → {dump(c.new)}"


@app.command("diff")
def diff(
    ctx: typer.Context,
    a: Annotated[
        str,
        typer.Argument(
            metavar="A", help="Checkpoint: id, SESSION@TURN, SESSION@latest, LangGraph id."
        ),
    ],
    b: Annotated[
        str,
        typer.Argument(
            metavar="B", help="Checkpoint to compare A with (a bare @TURN or @latest: A's session)."
        ),
    ],
    as_json: JsonOpt = False,
    width: WidthOpt = 100,
) -> None:
    """Entries added, removed and folded from checkpoint A to checkpoint B (any sessions of this
    archive), and a structural diff of their kernel and working memory.
    """
    from alpstore.debug.diff import diff as diff_checkpoints
    from alpstore.debug.entries import entry_line, short

    st = read_store(ctx, read_only=True)
    with _progress("comparing") as progress:
        r = diff_checkpoints(st, a, b, progress=progress)
    if as_json:
        print_json(
            {
                "a": _ck_doc(st, r.a),
                "b": _ck_doc(st, r.b),
                "common_prefix": r.common,
                "removed": [_entry_doc(p, e) for p, e in r.removed],
                "added": [_entry_doc(p, e) for p, e in r.added],
                "folded": [
                    {
                        "summary": _entry_doc(f.position, f.summary),
                        "replaced": [_entry_doc(p, e) for p, e in f.replaced],
                    }
                    for f in r.folds
                ],
                "kernel": [_change_doc(c) for c in r.kernel],
                "working_memory": [_change_doc(c) for c in r.working_memory],
            }
        )
        return
    echo_text(f"--- {_ref(st, r.a)} (checkpoint {r.a.id}, {r.a.length} entries)")
    echo_text(f"+++ {_ref(st, r.b)} (checkpoint {r.b.id}, {r.b.length} entries)")
    echo_text(f"common prefix: {r.common} {'entry' if r.common == 1 else 'entries'}")
    for f in r.folds:
        echo_text(
            f"folded {len(f.replaced)} entries into summary {short(f.summary.digest)} "
            f"at [{f.position}]:"
        )
        echo_text(f"  = {entry_line(f.position, f.summary, width)}")
        for p, e in f.replaced:
            echo_text(f"  - {entry_line(p, e, width)}")
    if r.removed:
        echo_text(f"removed {len(r.removed)} entries:")
        for p, e in r.removed:
            echo_text(f"  - {entry_line(p, e, width)}")
    if r.added:
        echo_text(f"added {len(r.added)} entries:")
        for p, e in r.added:
            echo_text(f"  + {entry_line(p, e, width)}")
    for name, changes in (("kernel", r.kernel), ("working memory", r.working_memory)):
        echo_text(f"{name}: {'unchanged' if not changes else f'{len(changes)} change(s)'}")
        for c in changes:
            echo_text(_change_line(c))
    if r.identical:
        echo_text("identical")


@app.command("replay")
def replay(
    ctx: typer.Context, session: SessionArg, as_json: JsonOpt = False, width: WidthOpt = 100
) -> None:
    """The session's turns in the order they happened, with backtracks, their steering
    messages, and recorded decisions.
    """
    from alpstore.debug.entries import entry_line
    from alpstore.debug.history import timeline

    st = read_store(ctx)
    s = st.get_session(session)
    with _progress("replaying") as progress:
        items = timeline(st, s, progress=progress)
    if as_json:
        out: list[dict[str, Any]] = []
        for it in items:
            if it.change is None:
                out.append({"type": it.kind, **it.detail, "at": _when(it.at)})
                continue
            c = it.change
            out.append(
                {
                    "type": "turn",
                    **_ck_doc(st, c.checkpoint),
                    "cut": len(c.delta.removed),
                    "entries": [_entry_doc(p, e) for p, e in c.added],
                }
            )
        print_json(out)
        return
    for it in items:
        if it.change is None:
            echo_text(_event_text(it.kind, it.detail))
            continue
        c = it.change
        ck = c.checkpoint
        if ck.trigger == "fork" and c.previous is not None and c.previous.session != ck.session:
            echo_text(
                f"== {_ref(st, ck)}: forked from {_ref(st, c.previous)} ({ck.length} entries)"
            )
            continue
        cut = f", {len(c.delta.removed)} entries cut" if c.delta.removed else ""
        abandoned = " [later cut by a backtrack]" if ck.abandoned else ""
        echo_text(f"== turn {ck.turn} (checkpoint {ck.id}, {ck.trigger or '-'}{cut}){abandoned}")
        for p, e in c.added:
            echo_text(f"   {entry_line(p, e, width)}")


@app.command("bisect")
def bisect(
    ctx: typer.Context,
    session: SessionArg,
    grep: Annotated[
        str | None, typer.Option("--grep", help="Bad when this regex matches the history.")
    ] = None,
    exec_cmd: Annotated[
        str | None,
        typer.Option(
            "--exec",
            help="Shell command given the history (JSON Lines) on stdin: exit 0 good, "
            "1-124 bad, 125+ failure.",
        ),
    ] = None,
    as_json: JsonOpt = False,
    width: WidthOpt = 100,
) -> None:
    """Find the first checkpoint where the history turns bad, in O(log n) hydrations."""
    from alpstore.debug.bisect import bisect as run_bisect
    from alpstore.debug.bisect import exec_predicate, grep_predicate
    from alpstore.debug.entries import entry_line

    if (grep is None) == (exec_cmd is None):
        raise UsageError("give exactly one of --grep REGEX or --exec CMD")
    predicate = grep_predicate(grep) if grep is not None else exec_predicate(str(exec_cmd))
    st = read_store(ctx)
    s = st.get_session(session)
    with _progress("bisecting") as progress:
        r = run_bisect(st, s, predicate, progress=progress)
    if as_json:
        print_json(
            {
                "first_bad": _ck_doc(st, r.first_bad),
                "last_good": _ck_doc(st, r.last_good),
                "hydrations": r.hydrations,
                "checkpoints": r.checkpoints,
                "bound": r.bound,
                "tested": [{"turn": c.turn, "checkpoint": c.id, "bad": bad} for c, bad in r.tested],
                "added": [_entry_doc(p, e) for p, e in r.added],
            }
        )
        return
    bad, good = r.first_bad, r.last_good
    echo_text(f"first bad: turn {bad.turn} = {_ref(st, bad)} (checkpoint {bad.id}, {bad.label})")
    echo_text(f"last good: turn {good.turn} = {_ref(st, good)} (checkpoint {good.id})")
    echo_text(
        f"{r.hydrations} hydrations over {r.checkpoints} checkpoints "
        f"(bound ⌈log2 n⌉ + 1 = {r.bound})"
    )
    echo_text(f"turn {bad.turn} added {len(r.added)} entries:")
    for p, e in r.added:
        echo_text(f"  + {entry_line(p, e, width)}")


@app.command("expand")
def expand(
    ctx: typer.Context, checkpoint: CheckpointArg, as_json: JsonOpt = False, width: WidthOpt = 100
) -> None:
    """A checkpoint's history with every summary replaced by the raw leaves it covers."""
    from alpstore.debug.entries import entry_line, short
    from alpstore.debug.expand import expand_rows

    st = read_store(ctx)
    ck = st.resolve_checkpoint(checkpoint)
    rows = expand_rows(st, ck)
    if as_json:
        print_json(
            [
                {
                    "position": r.position,
                    "digest": r.entry.hex,
                    "value": r.entry.value,
                    "summaries": [s.hex for s in r.summaries],
                }
                for r in rows
            ]
        )
        return
    summaries = {r.summaries[0].hex for r in rows if r.summaries}
    echo_text(
        f"{_ref(st, ck)} (checkpoint {ck.id}): {ck.length} entries, {len(summaries)} "
        f"summaries expanded to {len(rows)} entries"
    )
    for n, r in enumerate(rows):
        where = f"{{{short(r.summaries[-1].digest)}}} " if r.summaries else ""
        line = entry_line(n, r.entry, 0)
        text = f"{where}{line}"
        echo_text(text if not width or len(text) <= width else text[: width - 1] + "…")
