"""The recording hook: Claude Code's Stop / SubagentStop / PreCompact hooks (payload on stdin)
and Codex's ``notify`` program (payload as the last argument) run it after each turn, and it
records what the transcript gained since the last run.

It never fails or holds up the agent: it reads the payload, compares the transcript's size with
what the last run recorded (unchanged: done, nothing opened), and hands the turn to the run
root's **recorder** (:mod:`alpstore.cli.recorder`, ``alpstore watch``): a resident process
listening on ``<root>/traces/hooks/recorder.sock`` that has SQLAlchemy and the archive open
already, so a turn costs its own import (milliseconds), not a new interpreter's. The hook waits
for the recorder's ``committed`` (at most :data:`WAIT` seconds after it started; past that it
exits and the recorder still finishes), so when it exits the turn is in the archive. No recorder
running (the first turn, or after its idle timeout): the hook starts one, detached, and hands
the turn to it. The recorder cannot be reached, or it dies before answering: the hook forks a
detached one-shot import instead (the previous way), so a turn is never dropped.

An import takes a lock per transcript (runs for one transcript queue instead of racing), reads
only the bytes after the stored offset, writes them in one transaction, and logs to
``<root>/traces/hooks/record.log``. The exit code is always 0.

Run as ``python -c 'from alpstore.cli.record_hook import main; main()' ARGS`` (what
``hook install --record`` writes; ``-m`` works too, at the cost of ``runpy``) so that a turn
does not pay for the command line's imports (Typer, SQLAlchemy): it imports ``os``, ``sys``,
``json``, ``hashlib``, ``socket`` and ``time`` only (paths are strings here, no ``pathlib``, no
``typing``).
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
WAIT = 1.5
"""Seconds after its start the hook waits for the recorder's answer before it exits."""
FIRST_WAIT = 3.0
"""The same when the hook had to start the recorder (its imports and the archive's opening:
once per recorder)."""
START_WAIT = 1.0
"""Seconds after its start the hook tries to reach a recorder it started."""
IDLE_TIMEOUT = 1800
"""Seconds without a turn after which a recorder the hook started exits (the environment's
``ALPSTORE_RECORDER_IDLE_TIMEOUT`` says otherwise)."""
SOCKET_NAME = "recorder.sock"
LOCK_NAME = "recorder.lock"
RECORDER_CODE = "from alpstore.cli.recorder import main; main()"
"""What the hook runs to start a recorder (``alpstore watch`` without Typer's imports)."""
CLOSING_EVENTS = frozenset({"Stop", "agent-turn-complete"})
"""Events after which the turn is over (checkpointed); others leave it open."""
MAX_PAYLOAD = 8 * 1024 * 1024


def _hooks_dir(root: str) -> str:
    return os.path.join(root, "traces", "hooks")


def log(root: str, text: str) -> None:
    """Append a line to the run root's hook log (else the user's temp log)."""
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


def run_import(root: str, path: str, *, close_turn: bool, store: Any = None) -> str:
    """Import what ``path`` gained (one transaction, under a per-transcript lock) into the
    archive of ``root`` (or ``store``, open already: the recorder's); return what was done, as
    a log line.
    """
    import fcntl
    from pathlib import Path

    from alpstore.transcripts.importing import import_transcript

    seen = seen_file(root, path)
    os.makedirs(os.path.dirname(seen), exist_ok=True)
    with open(seen[: -len(".seen")] + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        signature = _signature(path)
        own = store is None
        if own:
            from alpstore.store import Store

            store = Store.open(Path(root), url=os.environ.get("ALPSTORE_DATABASE_URL") or None)
        try:
            result = import_transcript(
                store, Path(path), skip_bad_lines=True, close_turn=close_turn
            )
        finally:
            if own:
                store.close()
        # a turn left open is checkpointed by the next closing run, even with nothing new
        with open(seen, "w") as out:
            out.write(signature if close_turn else "")
    bad = f"; malformed lines skipped: {result.bad}" if result.bad else ""
    return result.describe() + bad


def database_key() -> str:
    """Which archive a process writes to, besides its run root (the database URL, hashed: a
    recorder serves only hooks that would write where it writes).
    """
    import hashlib

    url = os.environ.get("ALPSTORE_DATABASE_URL") or ""
    return hashlib.blake2b(url.encode(), digest_size=8).hexdigest()


def socket_path(root: str) -> str:
    """The recorder's socket for run root ``root``."""
    return os.path.join(_hooks_dir(root), SOCKET_NAME)


def connect(root: str, timeout: float) -> Any:
    """A connection to ``root``'s recorder, or None (none listening, or the socket is not this
    user's). A path too long for a socket address is reached through ``/proc/self/fd``.
    """
    import socket
    import stat

    path = socket_path(root)
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
        return None
    folder = -1
    address = path
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if len(os.fsencode(path)) > 100:
            folder = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
            address = f"/proc/self/fd/{folder}/{SOCKET_NAME}"
        sock.settimeout(max(timeout, 0.01))
        sock.connect(address)
        return sock
    except OSError:
        sock.close()
        return None
    finally:
        if folder >= 0:
            os.close(folder)


def ask(sock: Any, request: dict[str, Any], timeout: float) -> dict[str, Any] | None:
    """Send one request line, read the one answer line: None when the recorder closed the
    connection without an answer; raises ``TimeoutError`` past ``timeout``.
    """
    sock.settimeout(max(timeout, 0.01))
    sock.sendall(json.dumps(request).encode() + b"\n")
    data = b""
    while not data.endswith(b"\n") and len(data) < 1 << 20:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    if not data.endswith(b"\n"):
        return None
    doc = json.loads(data)
    return doc if isinstance(doc, dict) else None


def start_recorder(root: str, *extra: str) -> None:
    """Start a recorder for ``root``: a detached process (own session, no terminal, stdio on
    /dev/null so that the runtime waiting on the hook's output does not wait on it).
    """
    argv = [sys.executable, "-c", RECORDER_CODE, "--root", root, *extra]
    pid = os.fork()
    if pid != 0:
        os.waitpid(pid, 0)
        return
    try:  # the child: a new session, then a grandchild that init adopts
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.execv(sys.executable, argv)
    except BaseException as exc:  # logged; the hook falls back to a one-shot import
        log(root, f"record: the recorder could not be started: {type(exc).__name__}: {exc}")
    finally:
        os._exit(0)


def _hand_over(root: str, path: str, event: str, close_turn: bool, started: float) -> bool:
    """Give the turn to the run root's recorder (starting one if none runs) and wait for its
    answer until :data:`WAIT` seconds after ``started`` (:data:`FIRST_WAIT` when it started
    it): True when the recorder has it (the turn committed, its failure logged, or still being
    recorded past the wait).
    """
    import time

    wait = WAIT
    sock = connect(root, START_WAIT)
    if sock is None:
        wait = FIRST_WAIT
        idle = os.environ.get("ALPSTORE_RECORDER_IDLE_TIMEOUT") or str(IDLE_TIMEOUT)
        start_recorder(root, "--idle-timeout", idle)
        while sock is None and time.monotonic() < started + START_WAIT:
            time.sleep(0.005)
            sock = connect(root, started + START_WAIT - time.monotonic())
        if sock is None:
            return False
    request = {"op": "record", "path": path, "event": event, "close": close_turn}
    request["db"] = database_key()
    try:
        answer = ask(sock, request, started + wait - time.monotonic())
    except TimeoutError:
        return True  # the recorder has the turn and finishes it on its own
    except (OSError, ValueError):
        return False
    finally:
        sock.close()
    return answer is not None and answer.get("status") in ("committed", "failed")


def unchanged(root: str, path: str) -> bool:
    """The transcript (and its subagent files) have the size the last run recorded."""
    try:
        with open(seen_file(root, path)) as handle:
            return handle.read() == _signature(path)
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    """Run the hook; always 0."""
    import time

    started = time.monotonic()
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
            log(root, f"record {event}: no transcript to read ({doc.get('transcript_path')})")
            return 0
        if unchanged(root, path):
            return 0  # nothing new: not even the archive is opened
        close_turn = event in CLOSING_EVENTS
        if opts["foreground"]:
            log(root, f"record {event}: {run_import(root, path, close_turn=close_turn)}")
            return 0
        if _hand_over(root, os.path.abspath(path), event, close_turn, started):
            return 0
        if os.fork() != 0:  # no recorder: a detached one-shot import (a turn is never dropped)
            return 0  # the agent goes on; the child imports
        _detached(root, path, event, close_turn)
    except Exception as exc:  # the hook never fails the agent
        log(root, f"record: {type(exc).__name__}: {exc}")
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
        log(root, f"record {event}: {run_import(root, path, close_turn=close_turn)}")
    except BaseException as exc:  # logged, never raised to anyone
        log(root, f"record {event}: {type(exc).__name__}: {exc}")
    finally:
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
