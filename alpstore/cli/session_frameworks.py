"""`session backtrack` and `session fork` on a framework's thread: what alpstore does to a
LangGraph thread or an Agents SDK session, the framework sees (issue 40).

A LangGraph thread's backtrack and fork go through ``alpstore.integrations.lgthreads`` (a
LangGraph checkpoint is written, a thread id made); an Agents SDK session's backtrack is the
plain one (its items are the session's head), its fork is named ``openai-agents:<new id>``.
"""

from __future__ import annotations

from typing import Any

from alpstore.cli._common import echo
from alpstore.cli._terminal import term
from alpstore.errors import SessionStateError, UsageError

AGENTS = "openai-agents:"
LANGGRAPH = "langgraph:"


def langgraph_thread(st: Any, session_id: int) -> tuple[str, str] | None:
    """``(thread_id, ns)`` when the session holds a LangGraph thread namespace."""
    from alpstore.portable.lgrows import thread_of

    with st.db.read() as conn:
        return thread_of(conn, session_id)


def _ops(thread_id: str) -> Any:
    try:
        from alpstore.integrations import lgthreads
    except ImportError as err:
        raise UsageError(
            f"session of LangGraph thread {thread_id!r}: changing it so LangGraph sees the "
            f"change needs LangGraph ({err})",
            hint="pip install 'alpstore[langgraph]'",
        ) from err
    return lgthreads


def backtrack_langgraph(
    st: Any, s: Any, thread: tuple[str, str], target: Any, count: int, text: str | None
) -> None:
    """Rewind the thread to ``target`` (``count`` steps back) and continue it from there with
    ``text`` added, as LangGraph's ``update_state`` would; print what LangGraph now runs from.
    """
    step, _ = _ops(thread[0]).backtrack_thread(st, target, text)
    echo(
        f"backtracked {count} step(s) to checkpoint {target.id} (turn {target.turn}, "
        f"{target.length} entries)" + (f"; injected /steer {term(text)}" if text else "")
    )
    echo(
        f"LangGraph thread {term(step.thread_id)} continues from checkpoint_id "
        f"{step.checkpoint_id}: graph.invoke(None, {{'configurable': {{'thread_id': "
        f"{step.thread_id!r}}}}}) runs from there"
    )


def target_of(st: Any, s: Any, ref: str | None, count: int | None) -> tuple[Any, int]:
    """The retained checkpoint a backtrack goes to, and how many steps back it lies."""
    kept = st.list_checkpoints(s.info().id)
    if ref is None:
        assert count is not None
        if count < 1 or count >= len(kept):
            raise SessionStateError(
                f"session {s.uuid}: cannot backtrack {count} step(s); only {len(kept)} "
                f"checkpoint(s) retained (at most {max(len(kept) - 1, 0)})"
            )
        return kept[-1 - count], count
    if ref.startswith("@"):
        ref = s.uuid + ref
    ck = st.resolve_checkpoint(ref)
    if ck.session != s.uuid:
        raise UsageError(f"checkpoint {ref!r} is in session {ck.session}, not {s.uuid}")
    ids = [c.id for c in kept]
    if ck.id not in ids:
        raise UsageError(
            f"checkpoint {ref!r} (checkpoint {ck.id}) is not retained: cannot rewind to it"
        )
    return ck, len(ids) - 1 - ids.index(ck.id)


def fork_langgraph(
    st: Any, ck: Any, thread: tuple[str, str], name: str | None, session_id: str | None
) -> tuple[Any, str]:
    """Fork the thread at ``ck`` as a new thread (``--name langgraph:ID`` names it): the new
    session and its thread id.
    """
    new_id = None
    if name is not None:
        if not name.startswith(LANGGRAPH) or len(name) == len(LANGGRAPH):
            raise UsageError(
                f"--name {name[:60]!r}: the fork of a LangGraph thread is a thread: name it "
                f"{LANGGRAPH}NEW_THREAD_ID"
            )
        new_id = name[len(LANGGRAPH) :]
    step = _ops(thread[0]).fork_thread(st, ck, new_id, session_id=session_id)
    return st.get_session(step.session), step.thread_id


def agents_fork_name(st: Any, source_name: str) -> str:
    """``openai-agents:<id>-fork`` (``-2``…): the first name no session has."""
    base = source_name[len(AGENTS) :].split(" #", 1)[0]
    n = 1
    while True:
        candidate = f"{AGENTS}{base}-fork" + (f"-{n}" if n > 1 else "")
        if st.find_session_named(candidate) is None:
            return candidate
        n += 1
