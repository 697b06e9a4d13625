"""The recorder (``alpstore watch``): one resident process per run root that records turns.

The recording hook hands it each turn over a Unix socket (``<root>/traces/hooks/recorder.sock``,
owner-only) and waits for ``committed``: the recorder has SQLAlchemy imported and the archive
open, so a turn costs its own import (milliseconds) instead of a new interpreter's (the import
of SQLAlchemy and the store alone, ~0.3 s). It can also watch Codex's sessions folder and
record each rollout as it grows.

One recorder per run root: it holds ``recorder.lock`` (an exclusive ``flock``, released by the
kernel however the process ends) for as long as it runs; a socket left behind by one that died
is stale (no lock holder) and replaced. It binds its socket before importing anything heavy, so
a hook that started it can hand it the turn at once; the turn waits in the socket until the
archive is open. Requests are served one at a time, each import in its own transaction (a
recorder killed mid-import leaves the turn wholly out; the next hook, finding no recorder,
starts one, which imports it). It exits after ``idle_timeout`` seconds without a turn (0:
never), on ``--stop`` (a ``stop`` request), SIGTERM or Ctrl-C, after answering what reached its
socket.

Protocol: one JSON line each way per connection. ``{"op": "record", "path", "event", "close",
"db"}`` → ``{"status": "committed" | "failed" | "other-database", "detail"}``; ``{"op":
"status"}`` → ``{"status": "running", "pid", "root", "since", "recorded", "codex"}``; ``{"op":
"stop"}`` → ``{"status": "stopping", "pid"}``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

from alpstore.cli import record_hook as hook

POLL = 2.0
"""Seconds between two looks at the Codex sessions folder."""
MAX_REQUEST = 1 << 16
REQUEST_TIMEOUT = 2.0
"""Seconds a connection may take to send its request line."""
BIG = 1 << 20
"""An import of at least this many new bytes is logged before it starts too."""
TURN_OVER = frozenset({"task_complete", "turn_aborted"})
"""Codex ``event_msg`` types that end a turn (its checkpoint is written at once)."""


def codex_sessions(codex_home: str | None) -> str:
    """Codex's sessions folder (``$CODEX_HOME/sessions``, by default ``~/.codex/sessions``)."""
    home = codex_home or os.environ.get("CODEX_HOME") or os.path.expanduser("~/.codex")
    return os.path.join(home, "sessions")


def rollouts(folder: str) -> dict[str, int]:
    """Every ``rollout-*.jsonl`` under ``folder/YYYY/MM/DD`` and its size."""
    found: dict[str, int] = {}
    stack = [(folder, 0)]
    while stack:  # three levels of dated folders: iterative, never deeper
        path, depth = stack.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        for entry in entries:
            try:
                if depth < 3 and entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, depth + 1))
                elif (
                    depth == 3
                    and entry.name.startswith("rollout-")
                    and entry.name.endswith(".jsonl")
                    and entry.is_file(follow_symlinks=False)
                ):
                    found[entry.path] = entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return found


def turn_over(path: str) -> bool:
    """The rollout's last complete line ends a turn (Codex writes ``task_complete``)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 65536))
            tail = handle.read()
    except OSError:
        return False
    lines = tail.rstrip(b"\n").rsplit(b"\n", 1)
    if not tail.endswith(b"\n") or not lines:
        return False
    try:
        record = json.loads(lines[-1])
    except ValueError:
        return False
    payload = record.get("payload") if isinstance(record, dict) else None
    return (
        record.get("type") == "event_msg"
        and isinstance(payload, dict)
        and payload.get("type") in TURN_OVER
    )


class Busy(Exception):
    """Another recorder runs for this run root."""

    def __init__(self, pid: str) -> None:
        super().__init__(pid)
        self.pid = pid


class Recorder:
    """The resident recorder of one run root."""

    def __init__(
        self,
        root: str,
        *,
        idle_timeout: float,
        codex_folder: str | None,
        poll: float = POLL,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.root = os.path.abspath(root)
        self.idle_timeout = idle_timeout
        self.codex_folder = codex_folder
        self.poll = poll
        self.say = say
        self.db_key = hook.database_key()
        self.store: Any = None
        self.listener: socket.socket | None = None
        self.lock_fd = -1
        self.inode: tuple[int, int] | None = None
        self.since = time.time()
        self.last = time.monotonic()
        self.recorded = 0
        self.stopping = False
        self.sizes: dict[str, int] = {}
        self.open_rollouts: set[str] = set()

    # -- lifetime ---------------------------------------------------------------------------

    def acquire(self, wait: float = 0.0) -> None:
        """Take the run root's recorder lock (waiting up to ``wait`` seconds for a recorder
        that is exiting) and bind the socket.

        Raises:
            Busy: another recorder holds the lock.
            OSError: the run root's hooks folder or socket cannot be made.
        """
        import fcntl

        folder = os.path.dirname(hook.socket_path(self.root))
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(folder, hook.LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
                    os.close(fd)
                    raise Busy(pid) from None
                time.sleep(0.02)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.lock_fd = fd
        self._bind(hook.socket_path(self.root))

    def _bind(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):  # no lock holder: a dead recorder's
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        folder = -1
        address = path
        old = os.umask(0o177)  # the socket: owner-only (rw-------)
        try:
            if len(os.fsencode(path)) > 100:
                folder = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
                address = f"/proc/self/fd/{folder}/{hook.SOCKET_NAME}"
            sock.bind(address)
        except OSError:
            sock.close()
            raise
        finally:
            os.umask(old)
            if folder >= 0:
                os.close(folder)
        sock.listen(64)
        info = os.stat(path)
        self.inode = (info.st_dev, info.st_ino)
        self.listener = sock

    def release(self) -> None:
        """Stop listening (answering what already reached the socket), close the archive,
        drop the lock.
        """
        if self.listener is not None:
            path = hook.socket_path(self.root)
            try:  # only our own socket (a newer recorder's is left alone)
                info = os.stat(path)
                if (info.st_dev, info.st_ino) == self.inode:
                    os.unlink(path)
            except OSError:
                pass
            self.listener.setblocking(False)
            while True:
                try:
                    conn, _ = self.listener.accept()
                except OSError:
                    break
                self._serve(conn)
            self.listener.close()
            self.listener = None
        self._settle_store()
        self._close_store()
        if self.lock_fd >= 0:
            os.close(self.lock_fd)
            self.lock_fd = -1

    def _settle_store(self) -> None:
        """Before the archive closes: train the dictionary and pack what this recorder's turns
        left loose, as ``session import`` does after an import (``SqlArchive.settle``). A
        recorder's lifetimes rarely reach the background packer's threshold
        (``PACK_EVERY`` + ``PACK_KEEP_LOOSE`` new blobs in one process): without this, 150
        recorded turns kept 600 blobs loose, an archive ~3.5x the size an import makes.
        """
        if self.store is None or not self.recorded:
            return
        try:
            self.store.archive.settle()
        except Exception as exc:  # the turns are committed; only their packing is left
            self._log(f"recorder: packing at exit: {type(exc).__name__}: {exc}")

    def _close_store(self) -> None:
        if self.store is not None:
            try:
                self.store.close()
            except Exception as exc:
                self._log(f"recorder: closing the archive: {type(exc).__name__}: {exc}")
            self.store = None

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        """Serve until idle, stopped or signalled; then close the turns left open."""
        import selectors

        assert self.listener is not None
        self.listener.setblocking(False)
        selector = selectors.DefaultSelector()
        selector.register(self.listener, selectors.EVENT_READ)
        # Ctrl-C and SIGTERM set ``stopping`` and wake the select through a pipe: the turn
        # being imported finishes first (an exception raised mid-import dropped it, and could
        # land between a lock's acquisition and its release); a second one interrupts.
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        selector.register(wake_r, selectors.EVENT_READ)

        def stop(signum: int, frame: Any) -> None:
            if self.stopping:
                raise KeyboardInterrupt
            self.stopping = True
            with contextlib.suppress(OSError):
                os.write(wake_w, b"x")

        handlers = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        self._log(f"recorder {os.getpid()}: started" + self._watching())
        if self.codex_folder is not None:
            self._first_scan()
        next_scan = time.monotonic() + self.poll
        try:
            while not self.stopping:
                now = time.monotonic()
                timeout = None
                if self.codex_folder is not None:
                    timeout = max(0.0, next_scan - now)
                if self.idle_timeout > 0:
                    left = max(0.0, self.last + self.idle_timeout - now)
                    timeout = left if timeout is None else min(timeout, left)
                events = selector.select(timeout)
                if self.stopping:
                    break
                if any(key.fileobj is self.listener for key, _ in events):
                    try:
                        conn, _ = self.listener.accept()
                    except BlockingIOError:
                        continue
                    self._serve(conn)
                now = time.monotonic()
                if self.codex_folder is not None and now >= next_scan:
                    self._scan()
                    next_scan = time.monotonic() + self.poll
                if self.idle_timeout > 0 and now - self.last >= self.idle_timeout:
                    self._log(f"recorder {os.getpid()}: idle {self.idle_timeout:g} s, exiting")
                    break
        finally:
            selector.close()
            try:
                for path in sorted(self.open_rollouts):  # their last turn is over by now
                    self._record(path, "exit", close=True)
                self.release()
            finally:
                for sig, previous in handlers.items():
                    signal.signal(sig, previous)
                os.close(wake_r)
                os.close(wake_w)
            self._log(f"recorder {os.getpid()}: stopped ({self.recorded} imports)")

    def _watching(self) -> str:
        return "" if self.codex_folder is None else f", watching {self.codex_folder}"

    def _serve(self, conn: socket.socket) -> None:
        """Answer one connection's request."""
        with conn:
            try:
                conn.setblocking(True)
                conn.settimeout(REQUEST_TIMEOUT)
                if not self._same_user(conn):
                    return
                data = b""
                while not data.endswith(b"\n") and len(data) < MAX_REQUEST:
                    chunk = conn.recv(MAX_REQUEST)
                    if not chunk:
                        break
                    data += chunk
                request = json.loads(data)
                answer = self._answer(request if isinstance(request, dict) else {})
            except (OSError, ValueError) as exc:
                self._log(f"recorder: a bad request: {type(exc).__name__}: {exc}")
                return
            with contextlib.suppress(OSError):  # the hook stopped waiting: committed all the same
                conn.sendall(json.dumps(answer).encode() + b"\n")

    def _same_user(self, conn: socket.socket) -> bool:
        option = getattr(socket, "SO_PEERCRED", None)
        if option is None:  # the socket's owner-only mode is the guard
            return True
        import struct

        creds = conn.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        return bool(uid == os.getuid())

    def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "status":
            return {
                "status": "running",
                "pid": os.getpid(),
                "root": self.root,
                "since": self.since,
                "recorded": self.recorded,
                "codex": self.codex_folder,
            }
        if op == "stop":
            self.stopping = True
            return {"status": "stopping", "pid": os.getpid()}
        if op != "record":
            return {"status": "failed", "detail": f"unknown request {str(op)[:40]!r}"}
        if request.get("db") != self.db_key:
            return {"status": "other-database", "detail": "this recorder writes elsewhere"}
        path = request.get("path")
        if not isinstance(path, str) or not os.path.isabs(path) or not os.path.isfile(path):
            return {"status": "failed", "detail": f"no transcript at {str(path)[:200]!r}"}
        event = str(request.get("event") or "")[:40]
        return self._record(path, event, close=request.get("close") is True)

    def _record(self, path: str, event: str, *, close: bool) -> dict[str, Any]:
        """Import what ``path`` gained; the answer for the hook."""
        self.last = time.monotonic()
        backlog = _backlog(self.root, path)
        if backlog >= BIG:  # a long import (a first one, or one catching up): said before
            self._log(f"record {event}: {path}: reading {backlog / 1e6:.1f} MB")
        previous = signal.signal(signal.SIGALRM, _too_long)
        signal.alarm(hook.TIME_LIMIT)
        try:
            if self.store is None:
                from pathlib import Path

                from alpstore.store import Store

                url = os.environ.get("ALPSTORE_DATABASE_URL") or None
                self.store = Store.open(Path(self.root), url=url)
            detail = hook.run_import(self.root, path, close_turn=close, store=self.store)
        except BaseException as exc:  # logged and answered; the archive is opened afresh
            if isinstance(exc, KeyboardInterrupt):
                self.stopping = True
            detail = f"{type(exc).__name__}: {exc}"
            self._log(f"record {event}: {path}: {detail}")
            self._close_store()
            return {"status": "failed", "detail": detail}
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
            self.last = time.monotonic()
        self.recorded += 1
        self._log(f"record {event}: {detail}")
        if self.say is not None:
            self.say(f"{path}: {detail}")
        return {"status": "committed", "detail": detail}

    # -- Codex ------------------------------------------------------------------------------

    def _first_scan(self) -> None:
        """Note every rollout's size; one recorded before (by a hook or a recorder) that grew
        since is recorded now, the others when they next grow.
        """
        assert self.codex_folder is not None
        self.sizes = rollouts(self.codex_folder)
        for path in sorted(self.sizes):
            if os.path.exists(hook.seen_file(self.root, path)):
                self._rollout(path)

    def _scan(self) -> None:
        assert self.codex_folder is not None
        sizes = rollouts(self.codex_folder)
        for path, size in sorted(sizes.items()):
            if self.stopping:
                break
            if self.sizes.get(path) != size:
                self._rollout(path)
        self.sizes = sizes

    def _rollout(self, path: str) -> None:
        if hook.unchanged(self.root, path):
            return
        close = turn_over(path)
        self._record(path, "codex", close=close)
        if close:
            self.open_rollouts.discard(path)
        else:  # the turn goes on: checkpointed when it ends (or when the recorder exits)
            self.open_rollouts.add(path)

    def _log(self, text: str) -> None:
        hook.log(self.root, text)


def _backlog(root: str, path: str) -> int:
    """Bytes of ``path`` after the size its last recorded import saw (all of it when never
    recorded; 0 when unknown: the last run left its turn open).
    """
    try:
        with open(hook.seen_file(root, path)) as handle:
            seen = handle.read().split(",", 1)[0]
        if not seen.isdigit():
            return 0
        done = int(seen)
    except OSError:
        done = 0
    try:
        return max(0, os.path.getsize(path) - done)
    except OSError:
        return 0


def _too_long(signum: int, frame: Any) -> None:
    raise TimeoutError(f"the import ran past {hook.TIME_LIMIT} s")


def stop_signal(signum: int, frame: Any) -> None:
    """SIGTERM: stop as Ctrl-C does (the current turn finished, the socket answered)."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    """A recorder started by the hook: ``--root R --idle-timeout S`` (hooks only, no Codex
    folder); exits quietly when another one runs. Everything goes to the run root's log.
    """
    args = sys.argv[1:] if argv is None else argv
    root, idle = ".", float(hook.IDLE_TIMEOUT)
    for name, value in itertools.pairwise(args):
        if name == "--root":
            root = value
        elif name == "--idle-timeout":
            try:
                idle = max(0.0, float(value))
            except ValueError:
                hook.log(root, f"recorder: --idle-timeout {value[:40]!r} is not a number")
    signal.signal(signal.SIGTERM, stop_signal)
    recorder = Recorder(root, idle_timeout=idle, codex_folder=None)
    os.chdir("/")  # (the root is absolute now) a resident process holds no folder busy
    try:
        recorder.acquire(wait=2.0)
    except Busy:
        return  # another recorder serves this run root
    except OSError as exc:
        hook.log(root, f"recorder: cannot listen: {type(exc).__name__}: {exc}")
        return
    with contextlib.suppress(KeyboardInterrupt):
        recorder.run()
