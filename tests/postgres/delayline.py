"""A delaying TCP proxy in a process of its own, for the network benchmark (issue 45): the delay
of a database in the next rack, and no more.

``netproxy.NetProxy`` runs in the client's own process (an asyncio loop on a thread), which its
fault controls need. Its deliveries then wait for the client's interpreter lock: when a
thread of the client (a turn's Python, the dictionary trainer, the packer) holds it, a reply
due now waits for the switch interval (5 ms) at worst, and the delay measured through it ran
0.35-0.8 ms over the configured one on each round trip (more under load). A real network
delays no client thread. ``DelayLine`` does what the benchmark needs — delay each direction by
``delay_s`` and count round trips — in a child process (``python -m tests.postgres.delayline``), on
plain threads: per connection and direction one thread reads and stamps each chunk with its
due time, one sleeps to it (1 µs timer slack, the last 30 µs yielding in a loop) and sends.

Round trips are counted as ``NetProxy`` counts them (a client burst that follows a server
reply, or opens a connection, is one) in total and by the client's port, so a benchmark can
tell its own connection's round trips from a background thread's (:meth:`counts`).

Bounded in time: the child stops after ``lifetime_s`` (default 600 s), when told to, or when
its parent goes.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from sqlalchemy.engine import make_url


class DelayLine:
    """The parent's handle on the child process that proxies to ``host:port``."""

    def __init__(
        self, host: str, port: int, *, delay_s: float = 0.0, lifetime_s: float = 600.0
    ) -> None:
        self.target = (host, port)
        self.delay_s = delay_s
        self.lifetime_s = lifetime_s
        self.port = 0
        self._child: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def start(self) -> DelayLine:
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        args = [str(a) for a in (*self.target, self.delay_s, self.lifetime_s)]
        self._child = subprocess.Popen(
            [sys.executable, "-m", "tests.postgres.delayline", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.port = int(self._ask(None))
        return self

    def _ask(self, what: str | None) -> str:
        """Send ``what`` (a line) to the child, return its answer's line."""
        child = self._child
        assert child is not None and child.stdin is not None and child.stdout is not None
        with self._lock:
            if what is not None:
                child.stdin.write(what + "\n")
                child.stdin.flush()
            ready, _, _ = select.select([child.stdout], [], [], 30)
            line = child.stdout.readline() if ready else ""
        if not line:
            self.stop()
            raise RuntimeError("the delay line did not answer within 30 s")
        return line

    def stop(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        assert child.stdin is not None
        with suppress(OSError):
            child.stdin.close()  # its end of file: the child stops
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(5)
        if child.stdout is not None:
            child.stdout.close()

    def __enter__(self) -> DelayLine:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def url(self, base: str) -> str:
        """``base`` (a PostgreSQL URL) pointed at this proxy instead of the server."""
        return make_url(base).set(host="127.0.0.1", port=self.port).render_as_string(False)

    def counts(self) -> tuple[int, dict[int, int]]:
        """(round trips so far, those by the client's local port)."""
        total, by_port = json.loads(self._ask("counts"))
        return int(total), {int(k): int(v) for k, v in by_port.items()}

    def log(self) -> list[tuple[int, float]]:
        """Every round trip so far: (the client's local port, ``time.perf_counter()`` when its
        first bytes came — the system's monotonic clock, this process's too)."""
        return [(int(p), float(t)) for p, t in json.loads(self._ask("log"))]

    @property
    def round_trips(self) -> int:
        return self.counts()[0]


@contextmanager
def delayed(base_url: str, *, delay_s: float = 0.0) -> Iterator[tuple[DelayLine, str]]:
    """A started delay line to ``base_url``'s server, and ``base_url`` pointed at it."""
    url = make_url(base_url)
    with DelayLine(url.host or "127.0.0.1", url.port or 5432, delay_s=delay_s) as line:
        yield line, line.url(base_url)


# ----------------------------------------------------------------- the child process
class _Counter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.total = 0
        self.by_port: dict[int, int] = {}
        self.log: list[tuple[int, float]] = []
        """Every round trip: (the client's port, ``time.perf_counter()`` — the system's
        monotonic clock, the parent's too — when its first bytes came)."""

    def add(self, port: int, at: float) -> None:
        with self.lock:
            self.total += 1
            self.by_port[port] = self.by_port.get(port, 0) + 1
            self.log.append((port, at))


class _Link:
    """One proxied connection: who spoke last (for the count)."""

    def __init__(self, client_port: int) -> None:
        self.client_port = client_port
        self.client_spoke_last = False


def _serve(host: str, port: int, delay_s: float, lifetime_s: float) -> None:
    """The child's main: answer the parent's lines on stdin until it says nothing more (its end
    of file) or ``lifetime_s`` passed."""
    counter = _Counter()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()
    threading.Thread(
        target=_accept, args=(listener, (host, port), delay_s, counter, stop), daemon=True
    ).start()
    print(listener.getsockname()[1], flush=True)
    give_up = time.monotonic() + lifetime_s
    try:
        while (left := give_up - time.monotonic()) > 0:
            ready, _, _ = select.select([sys.stdin], [], [], min(1.0, left))
            if not ready:
                continue
            line = sys.stdin.readline().strip()
            if line not in ("counts", "log"):
                break
            with counter.lock:
                answer = counter.log if line == "log" else [counter.total, counter.by_port]
                print(json.dumps(answer), flush=True)
    finally:
        stop.set()
        listener.close()


def _accept(
    listener: socket.socket,
    target: tuple[str, int],
    delay_s: float,
    counter: _Counter,
    stop: threading.Event,
) -> None:
    while not stop.is_set():
        try:
            client, (_, client_port) = listener.accept()
        except TimeoutError:
            continue
        except OSError:
            return
        try:
            server = socket.create_connection(target, timeout=10)
        except OSError:
            client.close()
            continue
        client.settimeout(None)
        server.settimeout(None)
        for sock in (client, server):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = _Link(client_port)
        for src, dst, upstream in ((client, server, True), (server, client, False)):
            chunks: queue.SimpleQueue[tuple[float, bytes] | None] | None = None
            if delay_s:  # else the reader sends each chunk itself, without a thread's wake-up
                chunks = queue.SimpleQueue()
                threading.Thread(target=_send, args=(dst, chunks), daemon=True).start()
            threading.Thread(
                target=_read,
                args=(link, src, dst, chunks, delay_s, counter, upstream),
                daemon=True,
            ).start()


def _read(
    link: _Link,
    src: socket.socket,
    dst: socket.socket,
    chunks: queue.SimpleQueue[tuple[float, bytes] | None] | None,
    delay_s: float,
    counter: _Counter,
    upstream: bool,
) -> None:
    """Read ``src``: count the round trips, then send each chunk on (``chunks`` None) or queue it
    with its due time for :func:`_send`."""
    try:
        while data := src.recv(65536):
            due = time.perf_counter() + delay_s
            if upstream:
                if not link.client_spoke_last:
                    link.client_spoke_last = True
                    counter.add(link.client_port, due - delay_s)
            else:
                link.client_spoke_last = False
            if chunks is None:
                dst.sendall(data)
            else:
                chunks.put((due, data))
    except OSError:
        pass
    finally:
        if chunks is None:
            _close(dst)
        else:
            chunks.put(None)


def _send(dst: socket.socket, chunks: queue.SimpleQueue[tuple[float, bytes] | None]) -> None:
    """Send each chunk of ``chunks`` to ``dst`` at its due time, until None."""
    _fine_timer_slack()
    try:
        while (item := chunks.get()) is not None:
            _sleep_until(item[0])
            dst.sendall(item[1])
    except OSError:
        pass
    finally:
        _close(dst)


def _close(sock: socket.socket) -> None:
    """End our side of ``sock``: the peer reads an end of file (then its reader ends it)."""
    with suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def _sleep_until(due: float) -> None:
    """Sleep to ``due`` (``time.perf_counter``) within some 10 µs: sleep to ``SPIN_S`` before it
    (with a fine timer slack, ``_fine_timer_slack``, ``time.sleep`` wakes some 20 µs late),
    then yield in a loop."""
    while (left := due - time.perf_counter()) > 0:
        time.sleep(left - SPIN_S if left > 2 * SPIN_S else 0)


SPIN_S = 0.00003
"""How long before a delivery's due time its sender stops sleeping and yields in a loop."""


def _fine_timer_slack() -> None:
    """The calling thread's timer slack at 1 µs instead of Linux's 50 µs default, by which the
    kernel may delay each wake-up: it made every delivery 50-70 µs late, twice a round trip."""
    if sys.platform.startswith("linux"):
        with suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(_PR_SET_TIMERSLACK, 1000, 0, 0, 0)


_PR_SET_TIMERSLACK = 29


if __name__ == "__main__":
    _serve(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
