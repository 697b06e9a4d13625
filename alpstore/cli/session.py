"""`alpstore session`: create, append, fold, checkpoint, backtrack, fork, resume, log, import.

The commands that only read (list, log, show, lineage) live in ``session_read``, ``open`` in
``session_open``; all are registered here, in the order `alpstore session --help` lists them.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from alpstore.cli import session_frameworks as frameworks
from alpstore.cli._common import (
    MAX_COUNT,
    JsonOpt,
    QuietOpt,
    SessionArg,
    echo,
    print_json,
    store,
    warn,
)
from alpstore.cli._terminal import term
from alpstore.cli.session_open import open_command
from alpstore.cli.session_read import lineage, list_sessions, log, show
from alpstore.cli.session_travel import digest_command, export_command
from alpstore.codec import parse_json
from alpstore.errors import InputError, UsageError
from alpstore.rules.ids import is_number

if TYPE_CHECKING:
    from alpstore.sessions import Entry

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
"""A LangGraph checkpoint_id: a checkpoint reference `backtrack` takes in place of N."""

app = typer.Typer(
    help="Agent sessions: covering heads, every-turn checkpoints, backtrack, fork, lineage.",
    no_args_is_help=True,
)


def _read_messages(source: str) -> list[Any]:
    """Messages from a JSON file/stdin: one object, a list of objects, or JSON Lines."""
    where = "stdin" if source == "-" else source
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as err:
        raise InputError(f"{where}: cannot read ({err.strerror})") from err
    text = data.decode("utf-8", "replace").removeprefix("\ufeff").strip()  # a BOM is fine
    if not text:
        raise InputError(f"{where}: no messages")
    try:
        doc = json.loads(text)
    except RecursionError as err:
        raise InputError(f"{where}: not valid JSON (nested too deeply)") from err
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
        Path | None,
        typer.Option(
            "--manifest",
            help="Agent manifest (YAML/JSON): its checkpoint policy runs on the new session, "
            "as with `session open`, which can also resume.",
        ),
    ] = None,
    retention: Annotated[
        str | None,
        typer.Option(
            "--retention",
            help="Keep all, single or last_n checkpoints (default all; with --manifest, the "
            "manifest's spec.checkpoint.retention).",
        ),
    ] = None,
    retention_n: Annotated[
        int, typer.Option("--retention-n", min=1, max=MAX_COUNT, help="n for last_n.")
    ] = 5,
) -> None:
    """Create an empty session and print its id.

    With --manifest, the manifest is validated (an inline credential or an invalid policy is
    refused before anything is stored) and its checkpoint policy is recorded with the session:
    every later command on it applies it, as for `session open`.
    """
    from alpstore.sessions import Retention

    if manifest is None:
        session = store(ctx).create_session(
            session_id=session_id, name=name, retention=Retention(retention or "all", retention_n)
        )
        echo(session.uuid)
        return
    if retention is not None:
        raise UsageError(
            "--retention cannot be used with --manifest: the manifest's "
            "spec.checkpoint.retention is the session's"
        )
    doc = _load_manifest(manifest)
    from alpstore.rules.secrets import require_no_secrets

    require_no_secrets(doc, what=str(manifest))  # CK-11: before the archive is even opened
    from alpstore.live import open_prepared, prepare_manifest

    prepared = prepare_manifest(doc, path=manifest, cwd=Path.cwd())
    if prepared.notice:
        warn(prepared.notice)
    opened = open_prepared(store(ctx), prepared, name=name, session_id=session_id, resume=False)
    echo(opened.live.session.uuid)


def _load_manifest(path: Path) -> Any:
    import yaml

    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte order mark is fine
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from err
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text") from err
    from alpstore.policy.overlays import UniqueKeyLoader, check_expansion

    try:
        doc = yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader
        check_expansion(doc, str(path), len(text.encode("utf-8")))
    except yaml.YAMLError as err:
        raise InputError(f"{path}: not valid YAML/JSON ({str(err).splitlines()[0]})") from err
    except RecursionError as err:
        raise InputError(f"{path}: not valid YAML/JSON (nested too deeply)") from err
    if not isinstance(doc, dict):
        raise InputError(f"{path}: an Agent manifest must be a mapping")
    return doc


app.command("open")(open_command)
app.command("list")(list_sessions)


EVENT_NAMES = ("after_llm_call", "after_tool_call", "before_destructive_tool", "turn_completed")


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
        bool,
        typer.Option(
            "--checkpoint", help="Also take an explicit checkpoint after appending (any policy)."
        ),
    ] = False,
    event: Annotated[
        str | None,
        typer.Option(
            "--event",
            help="What the append records for a session opened with a manifest: "
            "after_llm_call, after_tool_call, before_destructive_tool (steps inside a turn; "
            "messages optional), or turn_completed (the default). The session's policy "
            "decides whether it checkpoints.",
        ),
    ] = None,
) -> None:
    """Append messages to a session's covering head and print their digests.

    A session opened with `session open --manifest` runs under its recorded checkpoint policy:
    an append is a completed user turn unless --event names a step inside one, and the policy
    (every_turn, in_memory, on_event triggers, every_n_turns) decides whether it checkpoints.
    """
    if event is not None and event not in EVENT_NAMES:
        raise UsageError(f"--event {event!r}: expected one of {', '.join(EVENT_NAMES)}")
    mid_turn = event is not None and event != "turn_completed"
    if source is None and (role is None or content is None) and not mid_turn:
        raise UsageError("give a JSON source, or both --role and --content (or a mid-turn --event)")
    from alpstore.importers import OPENAI_ROLES

    if role is not None and role not in OPENAI_ROLES:
        raise UsageError(f"--role {role!r}: must be one of {', '.join(sorted(OPENAI_ROLES))}")
    messages: list[Any] = []
    if source is not None:
        messages = _read_messages(source)
    elif role is not None and content is not None:
        messages = [{"role": role, "content": content}]
    live = store(ctx).open_session(session)
    if live.policy is None:  # no recorded policy: plain appends, --checkpoint as always
        if event is not None:
            warn(
                f"session {live.uuid} has no checkpoint policy (open it with --manifest); "
                "--event records nothing"
            )
        if checkpoint:
            ck = live.session.commit_turn(messages, trigger="every_turn")
            echo(f"checkpoint {ck.id} at turn {ck.turn} ({ck.length} entries)")
            return
        for digest in live.session.append(messages) if messages else []:
            echo(digest.hex())
        return
    mark = live.event(str(event), messages) if mid_turn else live.commit_turn(messages)
    if checkpoint and mark is None:
        mark = live.checkpoint()
    if mark is not None:
        _print_mark(mark)
    elif messages:
        for text in _digests(messages):
            echo(text)
    else:
        echo(f"event {event}: no checkpoint under this session's policy")


def _digests(messages: list[Any]) -> list[str]:
    from alpstore.archive.reading import encode
    from alpstore.db.names import BLOB_MESSAGE

    return [encode(m, BLOB_MESSAGE)[0].hex() for m in messages]


def _print_mark(mark: Any) -> None:
    where = f"; file {mark.file}" if mark.file is not None else ""
    if mark.checkpoint is None:
        echo(
            f"checkpoint in memory at turn {mark.turn} ({mark.trigger}; this process only, "
            "storage memory)"
        )
        return
    ck = mark.checkpoint
    echo(f"checkpoint {ck.id} at turn {ck.turn} ({ck.length} entries, {ck.trigger}){where}")


@app.command("fold")
def fold(
    ctx: typer.Context,
    session: SessionArg,
    start: Annotated[
        int, typer.Argument(min=0, max=MAX_COUNT, help="First entry to fold (0-based).")
    ],
    end: Annotated[
        int, typer.Argument(min=0, max=MAX_COUNT, help="Entry after the last one folded.")
    ],
    summary: Annotated[str, typer.Option("--summary", help="The summary text.")],
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Replace entries START..END-1 of the head with a summary covering them (compaction)."""
    s = store(ctx).get_session(session)
    digest = s.fold(start, end, summary)
    if quiet:
        echo(digest.hex())
        return
    head = s.info().head_length
    if as_json:
        print_json(
            {
                "summary": digest.hex(),
                "session": s.uuid,
                "start": start,
                "end": end,
                "head_length": head,
            }
        )
        return
    echo(
        f"folded entries {start}..{end - 1} of {session} into summary {digest.hex()} "
        f"(the head now holds {head} entries; the folded ones stay in the archive)"
    )


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
    """Record a shallow checkpoint of the session's head and print its id.

    An explicit checkpoint works in every mode; under a recorded policy with disk or hybrid
    storage it also writes the deep file to the session's checkpoint directory.
    """
    kernel_doc = parse_json(_read_file(kernel), where=str(kernel)) if kernel else None
    live = store(ctx).open_session(session)
    mark = live.checkpoint(kernel=kernel_doc, label=label, trigger=trigger)
    ck = mark.checkpoint
    assert ck is not None
    echo(
        f"checkpoint {ck.id} ({term(ck.session)}@{ck.turn}, {ck.length} entries, view "
        f"{ck.archive_view_id})" + (f"; file {mark.file}" if mark.file else "")
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
    steps: Annotated[
        str | None,
        typer.Argument(
            metavar="N|CHECKPOINT",
            help="How many checkpoints to rewind, or the checkpoint to rewind to.",
            show_default=False,
        ),
    ] = None,
    steering: Annotated[
        list[str] | None, typer.Argument(help="Steering message injected as the next turn.")
    ] = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to", metavar="CHECKPOINT", help="Rewind to this checkpoint (SESSION@TURN, id)."
        ),
    ] = None,
) -> None:
    """Rewind N checkpoints (or to a checkpoint) and inject a steering message
    (`/backtrack N <message>`).
    """
    words = list(steering or [])
    if to is not None and steps is not None:
        words.insert(0, steps)  # with --to every argument after SESSION is the message
        steps = None
    target_ref = to
    if steps is not None and not is_number(steps):
        if "@" not in steps and not _UUID.fullmatch(steps):
            raise UsageError(
                f"N {steps[:30]!r}: expected a number of checkpoints to rewind, or a checkpoint "
                "(SESSION@TURN, SESSION@latest, a LangGraph checkpoint_id)",
                hint="--to CHECKPOINT takes any checkpoint reference, ids included",
            )
        target_ref = steps
    elif steps is not None and (len(steps) > 19 or int(steps) > MAX_COUNT):
        raise UsageError(f"N {steps[:30]}: at most {MAX_COUNT} checkpoints")
    if target_ref is None and steps is None:
        raise UsageError("give N (checkpoints to rewind) or --to CHECKPOINT")
    st = store(ctx)
    s = st.get_session(session)
    text = " ".join(words) if words else None
    thread = frameworks.langgraph_thread(st, s.id)
    if thread is not None:  # LangGraph sees it: a checkpoint as update_state writes one
        count = None if target_ref is not None else int(str(steps))
        ck, count = frameworks.target_of(st, s, target_ref, count)
        frameworks.backtrack_langgraph(st, s, thread, ck, count, text)
        return
    count = _steps_to(st, s, target_ref) if target_ref is not None else int(str(steps))
    bt = s.backtrack(count, text)
    target = bt.to_checkpoint
    echo(
        f"backtracked {count} step(s) to checkpoint {target.id} (turn {target.turn}, "
        f"{target.length} entries)" + (f"; injected /steer {term(text)}" if text else "")
    )


def _steps_to(st: Any, s: Any, ref: str) -> int:
    """How many retained checkpoints lie after checkpoint ``ref`` in ``s``'s session."""
    if ref.startswith("@"):
        ref = s.uuid + ref
    ck = st.resolve_checkpoint(ref)
    if ck.session != s.uuid:
        raise UsageError(f"checkpoint {ref!r} is in session {ck.session}, not {s.uuid}")
    kept = [c.id for c in st.list_checkpoints(s.info().id)]
    if ck.id not in kept:
        raise UsageError(
            f"checkpoint {ref!r} (checkpoint {ck.id}) is not retained: cannot rewind to it"
        )
    return len(kept) - 1 - kept.index(ck.id)


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
    quiet: QuietOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Fork a new session from a checkpoint: same history, parent recorded, no shared state."""
    st = store(ctx)
    ck = st.resolve_checkpoint(checkpoint_ref)
    source = st.get_session(ck.session)
    thread = None if expand else frameworks.langgraph_thread(st, source.id)
    framework_id = None
    source_name = source.info().name
    if source_name and source_name.startswith(frameworks.AGENTS) and name is None:
        name = frameworks.agents_fork_name(st, source_name)  # AlpstoreSession finds it
    if thread is not None:  # a new thread id LangGraph runs
        child, framework_id = frameworks.fork_langgraph(st, ck, thread, name, session_id)
    elif expand:
        from alpstore.debug.expand import fork_expanded

        child = fork_expanded(st, ck, session_id=session_id, name=name)
    else:
        child = st.fork_checkpoint(ck, session_id=session_id, name=name)
    if framework_id is None and name and name.startswith(frameworks.AGENTS):
        framework_id = name[len(frameworks.AGENTS) :]
    if quiet:
        echo(child.uuid)
        return
    info = child.info()
    if as_json:
        print_json(
            {
                "session": child.uuid,
                "name": info.name,
                "from_checkpoint": ck.id,
                "parent": ck.session,
                "turn": ck.turn,
                "head_length": info.head_length,
                **({} if framework_id is None else {"framework_id": framework_id}),
            }
        )
        return
    named = f" ({info.name})" if info.name else ""
    echo(
        f"forked session {child.uuid}{named} from checkpoint {ck.id} ({checkpoint_ref}, turn "
        f"{ck.turn}, {info.head_length} entries)"
    )
    if framework_id is not None:
        what = "LangGraph thread" if thread is not None else "Agents SDK session"
        echo(f"{what} id of the fork: {term(framework_id)}")


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
    before = s.history()
    ck = s.resume(st.resolve_checkpoint(at) if at else None)
    echo(f"resumed {term(s.uuid)} at checkpoint {ck.id} (turn {ck.turn}, {ck.length} entries)")
    dropped = before[ck.length :] if before[: ck.length] == s.history() else []
    steers = [e for e in dropped if _is_steer(e)]
    if dropped:
        warn(
            (
                "1 entry after that checkpoint was"
                if len(dropped) == 1
                else f"{len(dropped)} entries after that checkpoint were"
            )
            + " never checkpointed and left the head (the archive keeps them)"
            + (
                f", among them the /steer message of a backtrack ({_steer_text(steers[-1])}); "
                "`session append` it again to keep it"
                if steers
                else ""
            )
        )


def _is_steer(e: Entry) -> bool:
    v = e.value
    return (
        isinstance(v, dict)
        and v.get("role") == "user"
        and str(v.get("content", "")).startswith("/steer ")
    )


def _steer_text(e: Entry) -> str:
    text = " ".join(str(e.value.get("content", "")).split())
    return text if len(text) <= 60 else text[:59] + "…"


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


app.command("log")(log)
app.command("show")(show)
app.command("lineage")(lineage)
app.command("export")(export_command)
app.command("digest")(digest_command)


@app.command("import")
def import_history(
    ctx: typer.Context,
    sources: Annotated[
        list[Path],
        typer.Argument(
            help="OpenAI JSONL, a Claude Code transcript, a Codex rollout, or a `session "
            "export` file; several, or a folder (its .jsonl files): each its own transaction.",
            metavar="SOURCE...",
        ),
    ],
    name: Annotated[str | None, typer.Option("--name", help="Name of the new session.")] = None,
    session_id: Annotated[str | None, typer.Option("--id", help="The new session's id.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="auto, openai, claude or codex.")] = "auto",
    skip_bad_lines: Annotated[
        bool,
        typer.Option(
            "--skip-bad-lines",
            help="Claude Code / Codex: import around malformed lines and print their numbers.",
        ),
    ] = False,
) -> None:
    """Import a conversation as a new session, checkpointing every turn (one transaction:
    interrupted, it leaves nothing). Names are unique: a taken --name is refused; the default
    name (the file's stem) is suffixed when taken.

    A Claude Code transcript or a Codex rollout is imported as the tree it is (rewinds as
    backtracks, compactions as folds, subagents as child sessions) into the session of its own
    id; importing it again appends only what was added since (an unchanged file writes
    nothing; a torn last line waits for the next import).

    A file `session export` wrote (detected by its first line) is imported whole: the same
    session id, every checkpoint, backtrack and event, `session digest` equal.

    Several files or a folder: each file its own session and transaction (a refused one is
    named and the rest imported), a progress bar on a terminal, one summary line.
    """
    from alpstore.cli.session_import import import_command

    import_command(ctx, sources, name, session_id, fmt, skip_bad_lines)
