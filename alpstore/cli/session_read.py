"""`alpstore session list|log|show|lineage`: the commands that only read a session.

They open the archive with ``read_store`` (never created, never migrated) and print what it holds.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from alpstore.cli._common import (
    MAX_COUNT,
    JsonOpt,
    SessionArg,
    echo,
    echo_lines,
    print_json,
    read_store,
    warn,
    write_json_text,
)
from alpstore.errors import UsageError
from alpstore.rules.messages import cut_line, render

if TYPE_CHECKING:
    from alpstore.sessions import Entry, SessionInfo


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def list_sessions(
    ctx: typer.Context,
    as_json: JsonOpt = False,
    limit: Annotated[
        int | None,
        typer.Option("--limit", min=0, max=MAX_COUNT, help="Print at most this many sessions."),
    ] = None,
    offset: Annotated[
        int,
        typer.Option("--offset", min=0, max=MAX_COUNT, help="Skip this many sessions first."),
    ] = 0,
) -> None:
    """List every session in the archive, oldest first; --limit and --offset print one page
    of them. With no archive at the run root it says so (exit 4), as every reading command:
    a mistyped --root is not an empty archive.
    """
    store = read_store(ctx, read_only=True)
    if as_json:
        infos = store.list_sessions(limit=limit, offset=offset)
        print_json([_info_doc(i) for i in infos])
        return
    from alpstore.cli._table import Column, Kind, print_table

    rows = store.session_listing(limit=limit, offset=offset)

    print_table(
        [
            Column("SESSION", Kind.KEY),
            Column("NAME"),
            Column("STATUS", Kind.KEY),
            Column("TURN", Kind.KEY, right=True),
            Column("HEAD", Kind.KEY, right=True),
            Column("PARENT"),  # an id prefix names it: cut (marked) on a narrow terminal
        ],
        ((u, n or "-", st, t, h, p or "-") for u, n, st, t, h, p in rows),
    )


def _info_doc(i: SessionInfo) -> dict[str, Any]:
    return {
        "session": i.uuid,
        "name": i.name,
        "status": i.status,
        "turn": i.turn,
        "head_length": i.head_length,
        "archive_view_id": i.head.archive_view_id,
        "parent": i.parent,
        "root": i.root,
        "forked_from_checkpoint": i.source_checkpoint,
        "backtrack_count": i.backtrack_count,
        "retention": {"mode": i.retention.mode, "n": i.retention.n},
        "created_at": _when(i.created_at),
        "updated_at": _when(i.updated_at),
    }


def log(
    ctx: typer.Context,
    session: SessionArg,
    show_all: Annotated[
        bool,
        typer.Option(
            "--all/--no-all",
            help="Include the checkpoints backtracks cut (--no-all: only retained ones).",
        ),
    ] = True,
    as_json: JsonOpt = False,
) -> None:
    """List a session's checkpoints (turn, label, head length, bytes added) and decisions.

    For a LangGraph thread each step also shows its spelling SESSION@TURN.STEP (which every
    command taking a checkpoint accepts), the node that wrote it, its interrupts and the
    pending writes no later step consumed; a step from an older checkpoint (time travel)
    shows as a backtrack to it.
    """
    from alpstore.debug import lgsteps
    from alpstore.store import checkpoint_deltas

    st = read_store(ctx, read_only=True)
    s = st.get_session(session)
    name = s.info(refresh=False).name
    thread = lgsteps.is_thread(name)
    every = s.checkpoints(include_abandoned=True)
    cks = every if show_all else [ck for ck in every if not ck.abandoned]
    deltas = checkpoint_deltas(st, cks)
    # an import's bookkeeping (how far a transcript was read) is not a step of the session
    events = [e for e in st.session_events(s.id) if e["kind"] not in ("status", "import")]
    steps = lgsteps.thread_steps(st, s.id, str(name), every, events) if thread else {}
    if thread:
        events = [e for e in events if not lgsteps.is_mark(e)]
    rows: list[tuple[float, dict[str, Any]]] = []
    for ck in cks:
        added, size = deltas[ck.id]
        doc: dict[str, Any] = {
            "type": "checkpoint",
            "checkpoint": ck.id,
            "seq": ck.seq,
            "turn": ck.turn,
            "label": ck.label,
            "trigger": ck.trigger,
            "head_length": ck.length,
            "entries_added": added,
            "bytes_added": size,
            "retained": not ck.abandoned,
            "at": _when(ck.created_at),
        }
        step = steps.get(ck.id)
        if step is not None:
            doc.update(
                step=step.ref,
                node=step.node,
                checkpoint_id=step.checkpoint_id,
                pending_writes=step.pending_writes,
                marks=step.marks,
                events=step.values,
                subgraphs=step.subgraphs,
            )
        rows.append((ck.created_at, doc))
    made = {ck.id: ck.created_at for ck in every}
    for e in events:
        # a subagent goes under the turn that called it (an import of a whole transcript
        # writes the events after every turn of the main session)
        at = made.get(e["checkpoint"], e["at"]) if e["kind"] == "subagent" else e["at"]
        rows.append(
            (
                at,
                {
                    "type": e["kind"],
                    "checkpoint": e["checkpoint"],
                    "detail": e["detail"],
                    "at": _when(e["at"]),
                },
            )
        )
    for bt in st.session_backtracks(s.id):
        rows.append(
            (
                bt["at"],
                {
                    "type": "backtrack",
                    **{k: v for k, v in bt.items() if k != "at"},
                    "at": _when(bt["at"]),
                },
            )
        )
    rows.sort(key=lambda r: r[0])
    _mark_branches([r for _, r in rows])
    if as_json:
        print_json([r for _, r in rows])
        return
    from alpstore.cli._table import CHECKPOINT_COLUMNS, Column, Kind, print_table

    if thread:
        print_table(
            [
                Column("CKPT", Kind.KEY, right=True),
                Column("STEP", Kind.KEY),
                Column("NODE"),
                Column("TRIGGER"),
                Column("HEAD", Kind.KEY, right=True),
                Column("+BYTES", Kind.KEY, right=True),
                Column("NOTE", Kind.WRAP),
            ],
            (_step_row(r) for _, r in rows),
        )
        return
    print_table(
        [
            *CHECKPOINT_COLUMNS,
            Column("+BYTES", Kind.KEY, right=True),
            Column("NOTE", Kind.WRAP),
        ],
        (_log_row(r) for _, r in rows),
    )


def _step_row(r: dict[str, Any]) -> list[object]:
    """One row of a LangGraph thread's `session log`: a step, or an event in NOTE."""
    row = _log_row(r)
    if r["type"] != "checkpoint":
        return ["", "", "", "", "", "", row[-1]]
    notes = [n for n in (*r.get("marks", []), row[-1]) if n]
    if r.get("pending_writes"):
        notes.append(f"pending writes of {r['pending_writes']} task(s)")
    return [row[0], r.get("step", ""), r.get("node", "-"), row[3], row[4], row[5], "; ".join(notes)]


def _mark_branches(rows: list[dict[str, Any]]) -> None:
    """A backtrack that a LangGraph put made (time travel: a step from an older checkpoint)
    names the step that branched (``by``: the trigger of the checkpoint it wrote next).
    """
    for i, r in enumerate(rows):
        if r["type"] != "backtrack":
            continue
        nxt = next((n for n in rows[i + 1 :] if n["type"] == "checkpoint"), None)
        if nxt is not None and str(nxt["trigger"] or "").startswith("langgraph:"):
            r["by"] = nxt["trigger"]


def _log_row(r: dict[str, Any]) -> list[object]:
    """One row of `session log`: a checkpoint, or an event told in the NOTE column."""
    if r["type"] == "checkpoint":
        note = "" if r["retained"] else "cut by backtrack"
        return [
            r["checkpoint"],
            r["turn"],
            r["label"],
            r["trigger"] or "-",
            r["head_length"],
            r["bytes_added"],
            note,
        ]
    if r["type"] == "backtrack":
        steer = f"; steering: {r['steering']}" if r.get("steering") else ""
        by = f" (branch by {r['by']})" if r.get("by") else ""
        note = (
            f"backtrack {r['steps']} step(s) to checkpoint {r['to_checkpoint']}"
            f"{' (automatic)' if r['automatic'] else ''}{by}{steer}"
        )
    else:
        detail = json.dumps(r["detail"], ensure_ascii=False, sort_keys=True)
        note = f"{r['type']}: {detail}"
    return ["", "", "", "", "", "", note]


def _entry_line(i: int, e: Entry, width: int) -> str:
    """One entry of ``session show``, not yet made safe for a terminal (:func:`term_lines`)."""
    if e.kind == "summary":
        text = cut_line(str(e.value.get("summary", "")), width)
        return f"[{i}] summary of {len(e.covers)}: {text}"
    role, text = render(e.value, width)  # one line, its whitespace collapsed, cut
    return f"[{i}] {role}: {text}"


def show(
    ctx: typer.Context,
    session: SessionArg,
    at: Annotated[
        str | None, typer.Option("--at", help="Checkpoint (id, SESSION@TURN); default: the head.")
    ] = None,
    as_json: JsonOpt = False,
    width: Annotated[
        int,
        typer.Option("--width", min=0, max=MAX_COUNT, help="Cut lines at this width (0: never)."),
    ] = 160,
    policy: Annotated[
        bool,
        typer.Option(
            "--policy", help="Print only the checkpoint policy recorded with the session."
        ),
    ] = False,
) -> None:
    """Print the hydrated history of a session's head or of one of its checkpoints.

    A session opened with a manifest starts with a `policy:` line: the checkpoint policy
    recorded with it, which every later command applies.
    """
    from alpstore.policy.recorded import recorded_policy

    st = read_store(ctx, read_only=True)
    s = st.get_session(session)
    bound = recorded_policy(s.info(refresh=False).origin, where=f"session {s.uuid}")
    if policy:
        if as_json:
            print_json(bound.as_record() if bound else None)
        else:
            echo(f"policy: {bound.describe()}" if bound else "policy: none recorded")
        return
    if at is None:
        entries = s.history()
    else:
        ck = st.resolve_checkpoint(at)
        if ck.session != s.uuid:
            owner = at.rsplit("@", 1)[0] if "@" in at else ck.session
            raise UsageError(
                f"checkpoint {at} belongs to session {ck.session}, not to {session}",
                hint=f"to see it: alpstore session show {owner} --at {at}",
            )
        entries = st.hydrate(ck)
    if as_json:
        print_json([{"digest": e.hex, "kind": e.kind, "value": e.value} for e in entries])
        return
    if bound is not None:
        echo(f"policy: {bound.describe()}")
    echo_lines(_entry_line(i, e, width) for i, e in enumerate(entries))


def lineage(
    ctx: typer.Context,
    session: Annotated[
        str | None, typer.Argument(help="Show the tree this session belongs to (default: all).")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="tree, json, dot or mermaid.")] = "tree",
    svg: Annotated[
        Path | None, typer.Option("--svg", help="Also render an SVG with Graphviz dot.")
    ] = None,
) -> None:
    """Print the fork tree (sessions, fork points, backtracks)."""
    from alpstore.debug.lineage import render_lineage, write_svg

    st = read_store(ctx)
    if fmt == "tree":
        from alpstore.cli._table import print_tree
        from alpstore.debug.lineage import lineage_branches, lineage_roots

        print_tree(lineage_branches(*lineage_roots(st, session)), empty="(no sessions)")
    elif fmt == "json":
        write_json_text(render_lineage(st, session, fmt).rstrip("\n") + "\n")
    else:  # dot, mermaid: a steering message's control characters shown escaped on a terminal
        echo(render_lineage(st, session, fmt).rstrip("\n"))
    if svg is not None:
        written = write_svg(st, session, svg)
        if written:
            warn(f"wrote {svg}")
