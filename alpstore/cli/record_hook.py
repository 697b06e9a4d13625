"""The recording hook: Claude Code's Stop / SubagentStop / PreCompact hooks (payload on stdin)
and Codex's ``notify`` program (payload as the last argument) run it after each turn, and it
imports what the transcript gained since the last run.

It never fails or holds up the agent: it reads the payload, compares the transcript's size with
what the last run recorded (unchanged: done, nothing opened), and hands the import to a
detached child process; the agent's wait is that check and a fork. The child takes a lock per
transcript (runs for one transcript queue instead of racing), reads only the bytes after the
stored offset, writes them in one transaction, and logs any failure to
``<root>/traces/hooks/record.log``; it is killed after :data:`TIME_LIMIT` seconds (the
transaction then rolls back; the next run imports the same bytes). The exit code is always 0.

Run as ``python -c 'from alpstore.cli.record_hook import main; main()' ARGS`` (what
``hook install --record`` writes; ``-m`` works too, at the cost of ``runpy``) so that a turn
does not pay for the command line's imports (Typer, SQLAlchemy) unless there is something to
write: until it has decided, it imports ``os``, ``sys`` and ``json`` only (paths are strings
here, no ``pathlib``, no ``typing``).
"""

from __future__ import annotations

import json
import os
import sys

TYPE_CHECKING = False  # (``typing`` itself is not imported: it costs a hook run ~5 ms)
if TYPE_CHECKING:
    from typing import Any

TIME_LIMIT = 120
"""Seconds an import started by the hook may run before it is stopped."""
CLOSING_EVENTS = frozenset({"Stop", "agent-turn-complete"})
"""Events after which the turn is over (checkpointed); others leave it open."""
MAX_PAYLOAD = 8 * 1024 * 1024


def _hooks_dir(root: str) -> str:
    return os.path.join(root, "traces", "hooks")


def _log(root: str, text: str) -> None:
    import time

    line = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {text}\n"
    try:
        folder = _hooks_dir(root)
        os.makedirs(folder, exist_ok=True)
    except OSError as err:  # the run root's log cannot be written: the user's temp log, and
        # never a word to the agent (a hook's output reaches Claude Code's transcript)
        _append(_fallback_log(), f"{line.rstrip()} [run root {root!r}: {err}]\n")
        return
    if not _append(os.path.join(folder, "record.log"), line):
        _append(_fallback_log(), f"{line.rstrip()} [run root {root!r}: log not writable]\n")


def _fallback_log() -> str:
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"alpstore-record-hook-{os.getuid()}.log")


def _append(path: str, line: str) -> bool:
    """Append ``line`` to ``path`` (never through a symlink): whether it was written."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    except OSError:
        return False
    try:
        os.write(fd, line.encode("utf-8", "replace")[:16384])
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _args(argv: list[str]) -> dict[str, Any]:
    opts: dict[str, Any] = {"root": ".", "runtime": "claude", "foreground": False}
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--root", "--runtime", "--codex-home") and i + 1 < len(argv):
            opts[arg[2:].replace("-", "_")] = argv[i + 1]
            i += 2
            continue
        if arg == "--foreground":
            opts["foreground"] = True
        else:
            rest.append(arg)
        i += 1
    opts["rest"] = rest
    return opts


def _payload(opts: dict[str, Any]) -> dict[str, Any]:
    if opts["runtime"] == "codex":  # notify: the JSON is the last argument
        raw = opts["rest"][-1] if opts["rest"] else "{}"
    else:
        raw = sys.stdin.buffer.read(MAX_PAYLOAD).decode("utf-8", "replace")
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise ValueError("the hook payload is not a JSON object")
    return doc


def _codex_rollout(doc: dict[str, Any], codex_home: str | None) -> str | None:
    """The rollout file of a Codex notify payload's thread (``rollout-<time>-<id>.jsonl``)."""
    import glob

    thread = doc.get("thread-id") or doc.get("thread_id") or doc.get("session_id")
    if not isinstance(thread, str) or not thread or "/" in thread or glob.has_magic(thread):
        return None
    home = codex_home or os.environ.get("CODEX_HOME") or os.path.expanduser("~/.codex")
    found = sorted(
        glob.glob(os.path.join(home, "sessions", "*", "*", "*", f"rollout-*-{thread}.jsonl"))
    )
    return found[-1] if found else None


def _signature(path: str) -> str:
    """The sizes of the transcript and of its subagent files: what a run would read."""
    sizes = [str(os.stat(path).st_size)]
    agents = os.path.join(os.path.splitext(path)[0], "subagents")
    if os.path.isdir(agents):
        for name in sorted(os.listdir(agents)):
            if name.startswith("agent-") and name.endswith(".jsonl"):
                sizes.append(f"{name}:{os.stat(os.path.join(agents, name)).st_size}")
    return ",".join(sizes)


def seen_file(root: str, path: str) -> str:
    """Where the last run wrote ``path``'s signature (under the run root's traces)."""
    import hashlib

    key = hashlib.blake2b(os.path.realpath(path).encode(), digest_size=16).hexdigest()
    return os.path.join(_hooks_dir(root), f"{key}.seen")


def run_import(root: str, path: str, *, close_turn: bool) -> str:
    """Import what ``path`` gained (one transaction, under a per-transcript lock); return
    what was done, as a log line.
    """
    import fcntl
    from pathlib import Path

    from alpstore.store import Store
    from alpstore.transcripts.importing import import_transcript

    seen = seen_file(root, path)
    os.makedirs(os.path.dirname(seen), exist_ok=True)
    with open(seen[: -len(".seen")] + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        signature = _signature(path)
        store = Store.open(Path(root), url=os.environ.get("ALPSTORE_DATABASE_URL") or None)
        try:
            result = import_transcript(
                store, Path(path), skip_bad_lines=True, close_turn=close_turn
            )
        finally:
            store.close()
        # a turn left open is checkpointed by the next closing run, even with nothing new
        with open(seen, "w") as out:
            out.write(signature if close_turn else "")
    bad = f"; malformed lines skipped: {result.bad}" if result.bad else ""
    return result.describe() + bad


def _unchanged(root: str, path: str) -> bool:
    try:
        with open(seen_file(root, path)) as handle:
            return handle.read() == _signature(path)
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    """Run the hook; always 0."""
    opts = _args(sys.argv[1:] if argv is None else argv)
    root: str = opts["root"]
    try:
        doc = _payload(opts)
        if opts["runtime"] == "codex":
            path = _codex_rollout(doc, opts.get("codex_home"))
            event = str(doc.get("type") or "")
        else:
            transcript = doc.get("transcript_path")
            path = transcript if isinstance(transcript, str) and transcript else None
            event = str(doc.get("hook_event_name") or "")
        if path is None or not os.path.isfile(path):
            _log(root, f"record {event}: no transcript to read ({doc.get('transcript_path')})")
            return 0
        if _unchanged(root, path):
            return 0  # nothing new: not even the archive is opened
        close_turn = event in CLOSING_EVENTS
        if opts["foreground"]:
            _log(root, f"record {event}: {run_import(root, path, close_turn=close_turn)}")
            return 0
        if os.fork() != 0:
            return 0  # the agent goes on; the child imports
        _detached(root, path, event, close_turn)
    except Exception as exc:  # the hook never fails the agent
        _log(root, f"record: {type(exc).__name__}: {exc}")
    return 0


def _detached(root: str, path: str, event: str, close_turn: bool) -> None:
    """The import, in a child detached from the agent (own session, no terminal)."""
    import signal

    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        signal.alarm(TIME_LIMIT)
        _log(root, f"record {event}: {run_import(root, path, close_turn=close_turn)}")
    except BaseException as exc:  # logged, never raised to anyone
        _log(root, f"record {event}: {type(exc).__name__}: {exc}")
    finally:
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
