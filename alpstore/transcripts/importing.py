"""One import of one transcript (Claude Code or Codex), incremental and idempotent, in ONE
transaction: a refused import (a malformed line, a file that no longer extends what was
imported) writes nothing.

The session is the source's own id (Claude Code's ``sessionId``, Codex's ``session_meta.id``):
importing the same transcript again appends only the records after the offset the last import
stored; an unchanged file writes nothing. Subagents become child sessions anchored at the
checkpoint of the turn that started them: sidechain records of the transcript itself (older
Claude Code), and ``<sessionId>/subagents/agent-<agentId>.jsonl`` files beside it.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from alpstore.canonical import digest_bytes
from alpstore.db import raw as rsql
from alpstore.errors import InputError, UsageError
from alpstore.rules.ids import session_id_problem, text_problem
from alpstore.rules.names import claim_name
from alpstore.sessions import new_session_uuid
from alpstore.transcripts import claude, codex
from alpstore.transcripts.lines import Cursor, file_size, read_records
from alpstore.transcripts.replay import Conversation
from alpstore.transcripts.state import (
    EVENT_KIND,
    SourceState,
    fingerprint,
    latest,
    require_extends,
)

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from alpstore.core.store import CoreStore as Store
    from alpstore.sessions import Session
    from alpstore.transcripts.steps import Step

TranscriptFormat = Literal["claude-code", "codex"]
DETECT_LINES = 64
"""Lines read from a file's start to tell its format and find its session id."""


@dataclass
class Detected:
    """What a transcript's first lines say: its format and its session id (None: unknown)."""

    format: TranscriptFormat | None
    source_id: str | None


def detect(path: Path) -> Detected:
    """The format of ``path`` (None: not a Claude Code or Codex transcript) and its id.

    Raises:
        InputError: the file cannot be read.
    """
    cursor = Cursor()
    fmt: TranscriptFormat | None = None
    for number, record in read_records(path, cursor, skip_bad_lines=True):
        if fmt is None:
            fmt = (
                "codex"
                if codex.is_record(record)
                else "claude-code"
                if claude.is_record(record)
                else None
            )
            if fmt is None:
                return Detected(None, None)
        ident = codex.session_id(record) if fmt == "codex" else claude.session_id(record)
        if ident is not None:
            return Detected(fmt, ident)
        if number >= DETECT_LINES:
            break
    return Detected(fmt, None)


@dataclass
class ImportResult:
    """What one import did.

    Fields:
        session: the main session's id.
        created: the session is new.
        format: the transcript's format.
        messages: messages written (all sessions).
        checkpoints: checkpoints written (all sessions).
        backtracks: rewinds written as backtracks.
        folds: compactions written as folds.
        children: child sessions (subagents) written to, new or not.
        skipped: records not stored, by kind.
        bad: malformed lines skipped (``skip_bad_lines``), by number.
        torn: the last line was left for the next import (still being written).
        unchanged: nothing new to import; nothing written.
    """

    session: str
    created: bool = False
    format: str = ""
    messages: int = 0
    checkpoints: int = 0
    backtracks: int = 0
    folds: int = 0
    children: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    bad: list[int] = field(default_factory=list)
    torn: bool = False
    unchanged: bool = False

    def describe(self) -> str:
        """One line telling what this import wrote."""
        if self.unchanged:
            return f"session {self.session}: nothing new to import ({self.format}); unchanged"
        parts = [f"{self.messages} messages", f"{self.checkpoints} checkpoints"]
        if self.backtracks:
            parts.append(f"{self.backtracks} rewinds as backtracks")
        if self.folds:
            parts.append(f"{self.folds} compactions as folds")
        if self.children:
            parts.append(f"{len(self.children)} subagent sessions")
        skipped = sum(self.skipped.values())
        if skipped:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.skipped.items()))
            parts.append(f"{skipped} records not conversation skipped ({kinds})")
        verb = "imported" if self.created else "appended"
        return f"{verb} {', '.join(parts)} into session {self.session} ({self.format})"

    def add(self, conv: Conversation) -> None:
        """Count what a conversation wrote."""
        self.messages += conv.messages
        self.checkpoints += conv.checkpoints
        self.backtracks += conv.backtracks
        self.folds += conv.folds
        for kind, n in conv.skipped.items():
            self.skipped[kind] = self.skipped.get(kind, 0) + n


def child_id(main: str, agent: str) -> str:
    """A subagent's session id: ``<main>.agent-<agentId>`` (hashed when that is no id)."""
    candidate = f"{main}.agent-{agent}"
    if session_id_problem(candidate) is None:
        return candidate
    return f"{main[:40]}.agent-{digest_bytes(agent.encode()).hex()[:16]}"


def _session_row(conn: Connection, uuid: str) -> int | None:
    row = rsql.fetchone(conn, "SELECT id FROM sessions WHERE uuid = ? FOR NO KEY UPDATE", (uuid,))
    return None if row is None else int(row[0])


class _Import:
    """One import's work inside its transaction."""

    def __init__(
        self, store: Store, conn: Connection, fmt: TranscriptFormat, skip_bad_lines: bool
    ) -> None:
        self.store = store
        self.conn = conn
        self.fmt = fmt
        self.skip_bad_lines = skip_bad_lines

    def reader(self, agent: str | None = None) -> Any:
        if self.fmt == "codex":
            return codex.step
        return lambda n, r: claude.step(n, r, agent=agent)

    def open(
        self,
        uuid: str,
        path: Path,
        size: int,
        *,
        name: str | None,
        parent: int | None,
        suffix: bool = False,
    ) -> tuple[Session, SourceState, bool]:
        """The session ``uuid`` and its import state, created when new.

        Raises:
            UsageError: the session exists but was not imported from a transcript.
            InputError: the file no longer extends what was imported.
        """
        row = _session_row(self.conn, uuid)
        if row is not None:
            state = latest(self.conn, row)
            if state is None:
                raise UsageError(
                    f"session {uuid} exists and was not imported from a transcript",
                    hint="import the transcript as another session with --id NEW-ID",
                )
            if state.file == str(path):
                require_extends(path, state, size, uuid)
            else:  # the transcript moved: the same source, read again from where it was
                state.file = str(path)
                require_extends(path, state, size, uuid)
            return self.store.get_session(uuid), state, False
        if name is not None:
            name = claim_name(self.conn, self.store, name, suffix=suffix)
        ck = None if parent is None else self.store.resolve_checkpoint(str(parent))
        session = self.store.create_session(session_id=uuid, name=name, parent=ck)
        return session, SourceState(self.fmt, str(path)), True

    def save(self, session: Session, state: SourceState, path: Path, cursor: Cursor) -> None:
        """Record how far ``path`` was read for ``session``."""
        state.offset, state.lines, state.bad = cursor.offset, cursor.lines, cursor.bad
        state.head, state.tail = fingerprint(path, cursor.offset)
        self.store.record_event(self.conn, session.id, EVENT_KIND, None, state.detail())


def import_transcript(
    store: Store,
    path: Path,
    *,
    fmt: TranscriptFormat | None = None,
    session_id: str | None = None,
    name: str | None = None,
    skip_bad_lines: bool = False,
    close_turn: bool = True,
) -> ImportResult:
    """Import (or continue importing) a Claude Code or Codex transcript.

    ``close_turn`` False leaves the last turn open (a hook run mid-turn: SubagentStop,
    PreCompact): its messages are appended, its checkpoint comes with the import that ends it.

    Raises:
        InputError: not a transcript of either format, a malformed line (naming it; unless
            ``skip_bad_lines``), no record at all, or a file that no longer extends what was
            imported.
        UsageError: the session id belongs to a session not imported from a transcript.
    """
    size = file_size(path)
    found = detect(path)
    fmt = fmt or found.format
    if fmt is None:
        raise InputError(f"{path}: not a Claude Code transcript or a Codex rollout")
    uuid = session_id or found.source_id
    suffix = False
    if uuid is None:  # no id of its own: a new session each time, named after the file
        uuid = new_session_uuid()
        if name is None and text_problem(path.stem) is None:
            name, suffix = path.stem, True
    if session_id_problem(uuid) is not None:
        raise InputError(f"{path}: its session id {uuid[:80]!r} {session_id_problem(uuid)}")
    with store.db.atomic() as conn:
        work = _Import(store, conn, fmt, skip_bad_lines)
        session, state, created = work.open(uuid, path, size, name=name, parent=None, suffix=suffix)
        result = ImportResult(session.uuid, created=created, format=fmt)
        cursor = Cursor(state.offset, state.lines)
        main = Conversation(store, session, state, conn)
        side: dict[str, list[Step]] = {}
        # a session this transaction created is its alone: its row is written once, at the
        # end, not at every turn (PostgreSQL keeps a row version per update until commit)
        with session.deferring_head(conn) if created else nullcontext():
            main_changed = _read_main(work, main, path, cursor, size, side, created, close_turn)
        result.torn, result.bad = cursor.torn, list(cursor.bad)
        result.add(main)
        files = _agent_files(path) if fmt == "claude-code" else []
        children = _children(work, main, side, files, path, result, close_turn)
        changed = main_changed or bool(children)
        if changed:
            state.children_open = sorted(
                {*state.children_open, *(c.session.uuid for c in children if c.state.open)}
                - {c.session.uuid for c in children if not c.state.open}
            )
            work.save(session, state, path, cursor)
        result.unchanged = not changed
    return result


def _read_main(
    work: _Import,
    main: Conversation,
    path: Path,
    cursor: Cursor,
    size: int,
    side: dict[str, list[Step]],
    created: bool,
    close_turn: bool,
) -> bool:
    """Replay the transcript's new records into the main session (sidechain records go to
    ``side``); True when the main session changed.

    Raises:
        InputError: a malformed line (unless skipped), or a new session with no message.
    """
    state, offset = main.state, cursor.offset
    step_of = work.reader()
    roots: dict[str, str] = {}
    """Sidechain records that name no agent (older versions): each chain's root, by record."""
    try:
        for number, record in read_records(
            path, cursor, skip_bad_lines=work.skip_bad_lines, size=size
        ):
            step = step_of(number, record)
            if step.agent == claude.NO_AGENT:  # one subagent per sidechain root
                root = roots.get(step.parent or "") or step.uuid or "?"
                roots[step.uuid or ""] = root
                step.agent = f"sidechain-{root[:8]}"
            if step.agent is not None:
                side.setdefault(step.agent, []).append(step)
            else:
                main.feed(step)
    except InputError as err:
        if work.skip_bad_lines or "not valid JSON" not in err.message:
            raise
        raise InputError(
            err.message, hint="--skip-bad-lines imports around it and names each line"
        ) from err
    consumed = cursor.offset != offset
    if created and main.messages == 0 and not side:
        raise InputError(f"{path}: no user or assistant messages to import")
    main_changed = consumed or (close_turn and state.open)
    if main_changed:  # (a turn an earlier import left open is checkpointed now)
        main.finish(close_turn=close_turn)
    return main_changed


def _agent_files(path: Path) -> list[tuple[str, Path]]:
    """``(agentId, file)`` of the subagent transcripts beside a Claude Code session."""
    folder = path.parent / path.stem / "subagents"
    if not folder.is_dir():
        return []
    out = []
    for child in sorted(folder.glob("agent-*.jsonl")):
        if child.is_file():
            out.append((child.name[len("agent-") : -len(".jsonl")], child))
    return out


def _children(
    work: _Import,
    main: Conversation,
    side: dict[str, list[Step]],
    files: list[tuple[str, Path]],
    path: Path,
    result: ImportResult,
    close_turn: bool,
) -> list[Conversation]:
    """Write each subagent's conversation to its child session: those written to. With
    ``close_turn``, a child whose last turn an earlier import left open is checkpointed too.
    """
    sources: dict[str, tuple[Path, list[Step] | None]] = {a: (path, s) for a, s in side.items()}
    for agent, file in files:
        sources.setdefault(agent, (file, None))
    done: list[Conversation] = [main]
    remaining = list(sources)
    while remaining:
        ready = [a for a in remaining if _anchor(done, a, sources[a][1]) is not None]
        agent = (ready or remaining)[0]
        remaining.remove(agent)
        file, steps = sources[agent]
        conv = _child(work, main.session.uuid, agent, file, steps, done, result, close_turn)
        if conv is not None:
            done.append(conv)
    if close_turn:
        for uuid in main.state.children_open:
            if all(c.session.uuid != uuid for c in done):
                done.append(_close_child(work, uuid, result))
    return done[1:]


def _close_child(work: _Import, uuid: str, result: ImportResult) -> Conversation:
    """Checkpoint the turn an earlier import left open in child session ``uuid``."""
    session = work.store.get_session(uuid)
    state = latest(work.conn, session.id)
    assert state is not None
    conv = Conversation(work.store, session, state, work.conn)
    conv.finish(close_turn=True)
    work.store.record_event(work.conn, session.id, EVENT_KIND, None, state.detail())
    result.add(conv)
    return conv


def _anchor(done: list[Conversation], agent: str, steps: list[Step] | None) -> int | None:
    """The checkpoint a subagent hangs from: the turn whose result names it, else the turn
    whose ``Task``/``Agent`` call gave its first prompt.
    """
    prompt = None
    if steps:
        first = next((s for s in steps if s.kind == "message" and s.value), None)
        prompt = claude.first_prompt(first.value) if first and first.value else None
    for conv in done:
        turn = conv.spawns.get(agent) or (conv.calls.get(prompt) if prompt else None)
        if turn is not None:
            return conv.anchor(turn)
    return None


def _child(
    work: _Import,
    main_uuid: str,
    agent: str,
    file: Path,
    steps: list[Step] | None,
    done: list[Conversation],
    result: ImportResult,
    close_turn: bool,
) -> Conversation | None:
    """Replay one subagent into its child session; None when nothing was new."""
    uuid = child_id(main_uuid, agent)
    size = file_size(file)
    if steps is None:  # its own file: read from where its last import stopped
        row = _session_row(work.conn, uuid)
        state = latest(work.conn, row) if row is not None else None
        if state is not None and state.file == str(file) and state.offset == size:
            return None
        steps = []
        cursor = Cursor(state.offset if state and state.file == str(file) else 0)
        if state is not None:
            cursor.lines = state.lines if state.file == str(file) else 0
        step_of = work.reader(agent)
        for number, record in read_records(
            file, cursor, skip_bad_lines=work.skip_bad_lines, size=size
        ):
            steps.append(step_of(number, record))
        if cursor.offset == (state.offset if state else 0) and state is not None:
            return None
    else:
        cursor = None
    anchor = _anchor(done, agent, steps)
    if anchor is None:
        anchor = done[0].anchor(done[0].turn)
    main = done[0].session.info(refresh=False)
    name = f"{main.name or main.uuid[:8]}.agent-{agent}"[:200]  # what lineage trees show
    session, state, created = work.open(
        uuid, file, size if cursor else 0, name=name, parent=anchor, suffix=True
    )
    if created and anchor is not None:
        row = rsql.fetchone(work.conn, "SELECT session_id FROM checkpoints WHERE id = ?", (anchor,))
        work.store.record_event(
            work.conn, int(row[0]), "subagent", anchor, {"child": uuid, "agent": agent}
        )
    conv = Conversation(work.store, session, state, work.conn)
    for step in steps:
        conv.feed(step)
    conv.finish(close_turn=close_turn)
    if cursor is not None:
        work.save(session, state, file, cursor)
    else:  # records of the main transcript: its offset is the main session's
        state.file = str(file)
        work.store.record_event(work.conn, session.id, EVENT_KIND, None, state.detail())
    result.add(conv)
    result.children.append(uuid)
    return conv
