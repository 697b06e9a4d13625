"""`alpstore session`: create, append, fold, checkpoint, backtrack, fork, resume, log, import."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from alpstore.cli._common import echo, print_json, store, warn
from alpstore.cli._terminal import term, term_line
from alpstore.cli.session_open import open_command
from alpstore.codec import parse_json
from alpstore.errors import InputError, UsageError
from alpstore.sessions import Entry, Retention, SessionInfo

app = typer.Typer(
    help="Agent sessions: covering heads, every-turn checkpoints, backtrack, fork, lineage.",
    no_args_is_help=True,
)

SessionArg = Annotated[str, typer.Argument(help="Session id, unique id prefix, or name.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _read_messages(source: str) -> list[Any]:
    """Messages from a JSON file/stdin: one object, a list of objects, or JSON Lines."""
    where = "stdin" if source == "-" else source
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as err:
        raise InputError(f"{where}: cannot read ({err.strerror})") from err
    text = data.decode("utf-8", "replace").strip()
    if not text:
        raise InputError(f"{where}: no messages")
    try:
        doc = json.loads(text)
    except ValueError:
        doc = [
            parse_json(line, where=f"{where}:{n}")
            for n, line in enumerate(text.splitlines(), 1)
            if line.strip()
        ]
    messages = doc if isinstance(doc, list) else [doc]
    for n, m in enumerate(messages, 1):
        if not isinstance(m, dict):
            raise InputError(f"{where}: message {n} is not a JSON object")
    return messages


@app.command("new")
def new(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Option("--name", help="A name to find it by.")] = None,
    session_id: Annotated[
        str | None, typer.Option("--id", help="Session id (default: a UUID).")
    ] = None,
    manifest: Annotated[
        Path | None, typer.Option("--manifest", help="Agent manifest (YAML/JSON) to embed.")
    ] = None,
    retention: Annotated[
        str, typer.Option("--retention", help="Keep all, single or last_n checkpoints.")
    ] = "all",
    retention_n: Annotated[int, typer.Option("--retention-n", help="n for last_n.")] = 5,
) -> None:
    """Create an empty session and print its id."""
    doc = _load_manifest(manifest) if manifest else None
    session = store(ctx).create_session(
        session_id=session_id, name=name, manifest=doc, retention=Retention(retention, retention_n)
    )
    echo(session.uuid)


def _load_manifest(path: Path) -> Any:
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from err
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text") from err
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise InputError(f"{path}: not valid YAML/JSON ({str(err).splitlines()[0]})") from err
    from alpstore.policy.overlays import check_expansion

    check_expansion(doc, str(path), len(text.encode("utf-8")))
    if not isinstance(doc, dict):
        raise InputError(f"{path}: an Agent manifest must be a mapping")
    return doc


app.command("open")(open_command)


@app.command("list")
def list_sessions(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List every session in the archive."""
    infos = store(ctx).list_sessions()
    if as_json:
        print_json([_info_doc(i) for i in infos])
        return
    echo(f"{'SESSION':36}  {'NAME':16}  {'STATUS':10}  {'TURN':>5}  {'HEAD':>6}  PARENT")
    for i in infos:
        name = term_line((i.name or "-")[:16])
        echo(
            f"{term_line(i.uuid):36}  {name:16}  {i.status:10}  {i.turn:>5}  "
            f"{i.head_length:>6}  {term_line(i.parent or '-')}"
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


@app.command("append")
def append(
    ctx: typer.Context,
    session: SessionArg,
    source: Annotated[
        str | None,
        typer.Argument(help="JSON file (object, list or JSON Lines), or - for stdin."),
    ] = None,
    role: Annotated[str | None, typer.Option("--role", help="Role of a single message.")] = None,
    content: Annotated[
        str | None, typer.Option("--content", help="Text of a single message (with --role).")
    ] = None,
    checkpoint: Annotated[
        bool, typer.Option("--checkpoint", help="Checkpoint after appending (every-turn style).")
    ] = False,
) -> None:
    """Append messages to a session's covering head and print their digests."""
    if source is None and (role is None or content is None):
        raise UsageError("give a JSON source, or both --role and --content")
    messages = (
        _read_messages(source) if source is not None else [{"role": role, "content": content}]
    )
    s = store(ctx).get_session(session)
    if checkpoint:
        ck = s.commit_turn(messages, trigger="every_turn")
        echo(f"checkpoint {ck.id} at turn {ck.turn} ({ck.length} entries)")
        return
    for digest in s.append(messages):
        echo(digest.hex())


@app.command("fold")
def fold(
    ctx: typer.Context,
    session: SessionArg,
    start: Annotated[int, typer.Argument(help="First entry to fold (0-based).")],
    end: Annotated[int, typer.Argument(help="Entry after the last one folded.")],
    summary: Annotated[str, typer.Option("--summary", help="The summary text.")],
) -> None:
    """Replace entries START..END-1 of the head with a summary covering them (compaction)."""
    digest = store(ctx).get_session(session).fold(start, end, summary)
    echo(digest.hex())


@app.command("checkpoint")
def checkpoint(
    ctx: typer.Context,
    session: SessionArg,
    label: Annotated[str | None, typer.Option("--label", help="Label (default turn-NNNN).")] = None,
    trigger: Annotated[str, typer.Option("--trigger", help="What triggered it.")] = "manual",
    kernel: Annotated[
        Path | None, typer.Option("--kernel", help="JSON file with the kernel state to keep.")
    ] = None,
) -> None:
    """Record a shallow checkpoint of the session's head and print its id."""
    kernel_doc = parse_json(_read_file(kernel), where=str(kernel)) if kernel else None
    ck = store(ctx).get_session(session).checkpoint(kernel=kernel_doc, label=label, trigger=trigger)
    echo(
        f"checkpoint {ck.id} ({term(ck.session)}@{ck.turn}, {ck.length} entries, view "
        f"{ck.archive_view_id})"
    )


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from err


@app.command("backtrack")
def backtrack(
    ctx: typer.Context,
    session: SessionArg,
    steps: Annotated[int, typer.Argument(help="How many checkpoints to rewind.")],
    steering: Annotated[
        list[str] | None, typer.Argument(help="Steering message injected as the next turn.")
    ] = None,
) -> None:
    """Rewind N checkpoints and inject a steering message (`/backtrack N <message>`)."""
    text = " ".join(steering) if steering else None
    bt = store(ctx).get_session(session).backtrack(steps, text)
    target = bt.to_checkpoint
    echo(
        f"backtracked {steps} step(s) to checkpoint {target.id} (turn {target.turn}, "
        f"{target.length} entries)" + (f"; injected /steer {term(text)}" if text else "")
    )


@app.command("fork")
def fork(
    ctx: typer.Context,
    checkpoint_ref: Annotated[
        str,
        typer.Argument(metavar="CHECKPOINT", help="Checkpoint id, SESSION@TURN or SESSION@latest."),
    ],
    session_id: Annotated[str | None, typer.Option("--id", help="The new session's id.")] = None,
    name: Annotated[str | None, typer.Option("--name", help="The new session's name.")] = None,
    expand: Annotated[
        bool,
        typer.Option("--expand", help="Fork with every summary replaced by the leaves it covers."),
    ] = False,
) -> None:
    """Fork a new session from a checkpoint: same history, parent recorded, no shared state."""
    st = store(ctx)
    ck = st.resolve_checkpoint(checkpoint_ref)
    if expand:
        from alpstore.debug.expand import fork_expanded

        child = fork_expanded(st, ck, session_id=session_id, name=name)
    else:
        child = st.fork_checkpoint(ck, session_id=session_id, name=name)
    echo(term(child.uuid))


@app.command("resume")
def resume(
    ctx: typer.Context,
    session: SessionArg,
    at: Annotated[
        str | None, typer.Option("--at", help="Checkpoint to resume from (default: latest).")
    ] = None,
) -> None:
    """Resume a session at a checkpoint: same id, history as of then (after a crash)."""
    st = store(ctx)
    s = st.get_session(session)
    ck = s.resume(st.resolve_checkpoint(at) if at else None)
    echo(f"resumed {term(s.uuid)} at checkpoint {ck.id} (turn {ck.turn}, {ck.length} entries)")


@app.command("status")
def status(
    ctx: typer.Context,
    session: SessionArg,
    new_status: Annotated[
        str | None,
        typer.Argument(metavar="[active|paused|terminated]", help="Set the status."),
    ] = None,
) -> None:
    """Show or set a session's status (a paused session refuses appends until active)."""
    s = store(ctx).get_session(session)
    if new_status is not None:
        if new_status not in ("active", "paused", "terminated"):
            raise UsageError(f"status {new_status!r}: expected active, paused or terminated")
        s.set_status(new_status)  # type: ignore[arg-type]
    echo(s.info().status)


@app.command("log")
def log(
    ctx: typer.Context,
    session: SessionArg,
    show_all: Annotated[
        bool, typer.Option("--all", help="Include checkpoints cut by backtracks.")
    ] = True,
    as_json: JsonOpt = False,
) -> None:
    """List a session's checkpoints (turn, label, head length, bytes added) and decisions."""
    from alpstore.store import checkpoint_deltas

    st = store(ctx)
    s = st.get_session(session)
    cks = s.checkpoints(include_abandoned=show_all)
    deltas = checkpoint_deltas(st, cks)
    events = [e for e in st.session_events(s.id) if e["kind"] not in ("status",)]
    rows: list[tuple[float, dict[str, Any]]] = []
    for ck in cks:
        added, size = deltas[ck.id]
        rows.append(
            (
                ck.created_at,
                {
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
                },
            )
        )
    for e in events:
        rows.append(
            (
                e["at"],
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
    if as_json:
        print_json([r for _, r in rows])
        return
    echo(f"{'CKPT':>6} {'TURN':>5}  {'LABEL':12} {'TRIGGER':14} {'HEAD':>6} {'+BYTES':>8}  NOTE")
    for _, r in rows:
        if r["type"] == "checkpoint":
            note = "" if r["retained"] else "cut by backtrack"
            echo(
                f"{r['checkpoint']:>6} {r['turn']:>5}  {term_line(r['label'][:12]):12} "
                f"{term_line((r['trigger'] or '-')[:14]):14} {r['head_length']:>6} "
                f"{r['bytes_added']:>8}  {note}"
            )
        elif r["type"] == "backtrack":
            steer = f" steering: {term_line(r['steering'])}" if r.get("steering") else ""
            echo(
                f"{'':>6} {'':>5}  -- backtrack {r['steps']} step(s) to checkpoint "
                f"{r['to_checkpoint']}{' (automatic)' if r['automatic'] else ''}{steer}"
            )
        else:
            detail = json.dumps(r["detail"], ensure_ascii=False, sort_keys=True)
            echo(f"{'':>6} {'':>5}  -- {term_line(r['type'])}: {term_line(detail)}")


def _entry_line(i: int, e: Entry, width: int) -> str:
    if e.kind == "summary":
        text = str(e.value.get("summary", ""))
        head = f"[{i}] summary of {len(e.covers)}:"
    elif not isinstance(e.value, dict):
        text = json.dumps(e.value, ensure_ascii=False)
        head = f"[{i}] value:"
    else:
        v = e.value
        role = v.get("role") or v.get("type") or "?"
        content = v.get("content")
        if content is None and isinstance(v.get("message"), dict):
            content = v["message"].get("content")
        if content is None and v.get("tool_calls"):
            calls = v["tool_calls"]
            content = "tool calls: " + ", ".join(
                str(c.get("function", {}).get("name", "?")) for c in calls if isinstance(c, dict)
            )
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        head = f"[{i}] {role}:"
    text = " ".join(str(text).split())
    if width and len(text) > width:
        text = text[: width - 1] + "…"
    return term(f"{head} {text}")


@app.command("show")
def show(
    ctx: typer.Context,
    session: SessionArg,
    at: Annotated[
        str | None, typer.Option("--at", help="Checkpoint (id, SESSION@TURN); default: the head.")
    ] = None,
    as_json: JsonOpt = False,
    width: Annotated[
        int, typer.Option("--width", help="Cut lines at this width (0: never).")
    ] = 160,
) -> None:
    """Print the hydrated history of a session's head or of one of its checkpoints."""
    st = store(ctx)
    s = st.get_session(session)
    entries = st.hydrate(st.resolve_checkpoint(at)) if at else s.history()
    if as_json:
        print_json([{"digest": e.hex, "kind": e.kind, "value": e.value} for e in entries])
        return
    for i, e in enumerate(entries):
        echo(_entry_line(i, e, width))


@app.command("lineage")
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

    st = store(ctx)
    sys.stdout.write(render_lineage(st, session, fmt).rstrip("\n") + "\n")
    if svg is not None:
        written = write_svg(st, session, svg)
        if written:
            warn(f"wrote {svg}")


@app.command("import")
def import_history(
    ctx: typer.Context,
    source: Annotated[Path, typer.Argument(help="OpenAI JSONL or Claude Code transcript.")],
    name: Annotated[str | None, typer.Option("--name", help="Name of the new session.")] = None,
    session_id: Annotated[str | None, typer.Option("--id", help="The new session's id.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="auto, openai or claude.")] = "auto",
) -> None:
    """Import a conversation as a new session, checkpointing every turn (one transaction:
    interrupted, it leaves nothing). Names are unique: a taken --name is refused; the default
    name (the file's stem) is suffixed when taken.
    """
    from alpstore.importers import import_history, parse_history
    from alpstore.portable.ids import check_text, text_problem

    if fmt not in ("auto", "openai", "claude"):
        raise UsageError(f"--format {fmt!r}: expected auto, openai or claude")
    if name is not None:
        check_text(name, "--name")
    default = source.stem if text_problem(source.stem) is None else "imported"
    parsed = parse_history(source, fmt)  # type: ignore[arg-type]
    st = store(ctx)
    s = import_history(st, parsed, name=name or default, session_id=session_id, suffix=name is None)
    info = s.info()
    if info.name != (name or default):
        warn(
            f"the name {term(name or default)} is taken here; the session is named "
            f"{term(info.name)}"
        )
    echo(
        f"imported {parsed.messages} messages in {len(parsed.turns)} turns into session "
        f"{term(info.uuid)} ({parsed.format} format, {len(parsed.turns)} checkpoints"
        + (f", {parsed.skipped} non-message records skipped" if parsed.skipped else "")
        + ")"
    )
