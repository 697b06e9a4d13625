"""A TCP proxy on loopback between the tests (or benchmarks) and PostgreSQL: the network a fleet's
database sits behind, and its faults.

``NetProxy(host, port)`` listens on ``127.0.0.1`` (an ephemeral port) and forwards every
connection to the server, in an asyncio loop on a thread of its own, so synchronous clients
(psycopg, SQLAlchemy) use it as they would a remote server. It can

- delay each direction by ``delay_s`` (one way: a round trip costs twice that);
- ``stall()``: go on accepting bytes (the kernel acknowledges them, as a middlebox would) but
  forward none either way until ``resume()``;
- ``cut_reply_after(marker)``: when the client sends bytes holding ``marker`` (``b"COMMIT"``),
  forward them and the server's replies up to the COMMIT's own (its ``CommandComplete``), drop
  that one and close the connection — the server did the work, the client never hears of it.
  What the server sent earlier (a transaction id it flushed before running the rest of a
  pipeline) still arrives, as it would on a network that broke after it;
- ``reset_all()``: end every open connection with a TCP reset;
- ``cap``: refuse connections past this many open ones as PostgreSQL does at a role's
  connection limit (``FATAL 53300 too many connections for role``); ``refuse_new``: drop every
  new connection at once (a server that is down);
- count round trips — the client's waits: a client burst that follows a server reply (or opens
  a connection) is one; bursts sent while a reply is outstanding (a pipeline written in several
  pieces) and the several replies a pipeline gets (a flushed transaction id, then the rest)
  add none. ``trace`` records every read of either side with its time, to see where a client
  waits.

Everything is bounded in time: the proxy stops by itself after ``lifetime_s`` (default 600 s),
so a test that forgets it never hangs a run.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import make_url

COMMIT_QUERY = b"COMMIT\x00"
"""The end of a simple query that ends with ``COMMIT`` (alone, or after a turn's statements):
``cut_reply_after``'s marker for "the COMMIT's reply" (``b"COMMIT"`` alone also matches
``READ COMMITTED``)."""


@dataclass(eq=False)
class _Link:
    """One proxied connection: the two transports' writers and who spoke last."""

    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    client_spoke_last: bool = False
    cut_armed: bool = False
    """Cut the connection at the server's reply to a COMMIT."""
    hold_armed: bool = False
    """Hold every reply from the server's reply to a COMMIT on (``stall_after``)."""
    scan: bytes = b""
    """While armed: the server's bytes after the last whole message (not forwarded yet)."""
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class NetProxy:
    """A delaying, faulting TCP proxy to ``host:port`` (see the module's docstring)."""

    def __init__(
        self, host: str, port: int, *, delay_s: float = 0.0, lifetime_s: float = 600.0
    ) -> None:
        self.target = (host, port)
        self.delay_s = delay_s
        self.lifetime_s = lifetime_s
        self.round_trips = 0
        self.log: list[bytes] | None = None
        """Set to a list to collect the first bytes of each round trip's request (debugging)."""
        self.trace: list[tuple[float, str, int, bytes]] | None = None
        """Set to a list to collect every read of either side: (perf_counter, ``"c"`` for the
        client's bytes or ``"s"`` for the server's, length, first bytes) — where a client waits."""
        self.connections = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._links: set[_Link] = set()
        self._stalled = False
        self._resumed: asyncio.Event | None = None
        self._cut_marker: bytes | None = None
        self._stall_marker: bytes | None = None
        self._hold_replies = False
        self.cap: int | None = None
        self.refuse_new = False
        self.refused = 0
        self._ready = threading.Event()
        self._waiters = ThreadPoolExecutor(max_workers=64, thread_name_prefix="netproxy-wait")
        """Where deliveries wait for their due time (see ``_deliver``)."""
        self._thread = threading.Thread(target=self._run, name="netproxy", daemon=True)
        self._server: asyncio.base_events.Server | None = None

    # ------------------------------------------------------------- lifecycle
    def start(self) -> NetProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start within 10 s")
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> NetProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def url(self, base: str) -> str:
        """``base`` (a PostgreSQL URL) pointed at this proxy instead of the server."""
        return make_url(base).set(host="127.0.0.1", port=self.port).render_as_string(False)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._resumed = asyncio.Event()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._accept, "127.0.0.1", 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._loop.call_later(self.lifetime_s, self._loop.stop)
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._server.close()
            for link in list(self._links):
                link.client.transport.abort()
                link.server.transport.abort()
            tasks = asyncio.all_tasks(self._loop)
            for task in tasks:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            self._loop.close()
            self._waiters.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------- faults
    def _call(self, fn: Any) -> None:
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                # after what ``fn`` scheduled: an aborted transport closes its socket in a
                # callback of its own (``_call_connection_lost``), so a reset is on the wire
                # only once that ran; returning before it let a test's next call send into a
                # socket about to be reset (the outcome then truly unknown)
                self._loop.call_soon(done.set)

        self._loop.call_soon_threadsafe(run)
        done.wait(10)

    def stall(self) -> None:
        """Forward nothing either way until :meth:`resume` (bytes are still accepted)."""

        def go() -> None:
            self._stalled = True
            assert self._resumed is not None
            self._resumed.clear()

        self._call(go)

    def resume(self) -> None:
        def go() -> None:
            self._stalled = self._hold_replies = False
            assert self._resumed is not None
            self._resumed.set()

        self._call(go)

    def cut_reply_after(self, marker: bytes | None) -> None:
        """Drop the server's reply to the next client bytes holding ``marker`` and close that
        connection (None: disarm)."""
        self._cut_marker = marker

    def stall_after(self, marker: bytes | None) -> None:
        """Once the client sends bytes holding ``marker``, hold every reply of the server from
        its reply to the COMMIT on (on every connection, new ones too) until :meth:`resume`:
        the bytes reach the server, no answer to the COMMIT comes back."""
        self._stall_marker = marker

    def reset_all(self) -> None:
        """End every open connection with a TCP reset (RST) to both ends."""

        def go() -> None:
            for link in list(self._links):
                for writer in (link.client, link.server):
                    sock = writer.get_extra_info("socket")
                    if sock is not None:
                        sock.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                        )
                    writer.transport.abort()
            self._links.clear()

        self._call(go)

    @contextmanager
    def counting(self) -> Iterator[list[int]]:
        """Count the round trips made inside the block: the list's one item, set on exit."""
        box = [0]
        start = self.round_trips
        yield box
        box[0] = self.round_trips - start

    # ------------------------------------------------------------- forwarding
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.refuse_new:
            self.refused += 1
            writer.transport.abort()
            return
        if self.cap is not None and len(self._links) >= self.cap:
            self.refused += 1
            await _refuse_at_cap(reader, writer)
            return
        try:
            s_reader, s_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        for w in (writer, s_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.connections += 1
        link = _Link(client=writer, server=s_writer)
        self._links.add(link)
        link.tasks = [
            asyncio.ensure_future(self._pump(link, reader, s_writer, upstream=True)),
            asyncio.ensure_future(self._pump(link, s_reader, writer, upstream=False)),
        ]

    async def _pump(
        self,
        link: _Link,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        upstream: bool,
    ) -> None:
        queue: asyncio.Queue[tuple[float, bytes, int]] = asyncio.Queue()
        sender = asyncio.ensure_future(self._deliver(link, queue, writer, upstream=upstream))
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if self.trace is not None:
                    self.trace.append(
                        (time.perf_counter(), "c" if upstream else "s", len(data), data[:80])
                    )
                if upstream:
                    if not link.client_spoke_last:
                        self.round_trips += 1
                        link.client_spoke_last = True
                        if self.log is not None:
                            self.log.append(data[:300])
                    if self._stall_marker is not None and self._stall_marker in data:
                        self._stall_marker = None
                        link.hold_armed = True
                    if self._cut_marker is not None and self._cut_marker in data:
                        self._cut_marker = None
                        link.cut_armed = True
                else:
                    link.client_spoke_last = False
                due = time.perf_counter() + self.delay_s
                if not upstream and (link.cut_armed or link.hold_armed):
                    before, rest = _split_at_commit_reply(link, data)
                    if before:
                        await queue.put((due, before, _FREE))
                    if rest is not None and link.cut_armed:
                        link.cut_armed = False
                        await queue.put((due, b"", _CUT))
                    elif rest is not None:
                        link.hold_armed = self._hold_replies = True
                        assert self._resumed is not None
                        self._resumed.clear()
                        await queue.put((due, rest, _HELD))
                    continue
                await queue.put((due, data, _HELD))
        except (ConnectionError, OSError):
            pass
        finally:
            await queue.put((0.0, b"", _HELD))
            await sender

    async def _deliver(
        self,
        link: _Link,
        queue: asyncio.Queue[tuple[float, bytes, int]],
        writer: asyncio.StreamWriter,
        *,
        upstream: bool,
    ) -> None:
        try:
            while True:
                due, data, kind = await queue.get()
                if not data and kind != _CUT:
                    break
                while self._stalled or (self._hold_replies and not upstream and kind != _FREE):
                    assert self._resumed is not None
                    await self._resumed.wait()
                if due > time.perf_counter():
                    # precisely, on a thread of the pool: the loop goes on reading (and
                    # delivering) meanwhile, so a burst sent while this one is in flight is
                    # delivered its own delay after its send, not after this one's delivery;
                    # the loop's own timer rounds to 1 ms
                    await self._loop.run_in_executor(self._waiters, _sleep_until, due)
                if kind == _CUT:
                    link.client.transport.abort()
                    link.server.transport.abort()
                    self._links.discard(link)
                    return
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            self._links.discard(link)


def _sleep_until(due: float) -> None:
    """Sleep to ``due`` (``time.perf_counter``) within some 50 µs: ``time.sleep`` overshoots
    by about that much, so the last 0.2 ms in short sleeps."""
    while (left := due - time.perf_counter()) > 0:
        time.sleep(left - 0.0002 if left > 0.0004 else min(left, 0.00005))


_HELD, _FREE, _CUT = 0, 1, 2
"""What the forwarding queue holds: bytes held while replies are held; bytes sent before a
COMMIT's reply was held (delivered anyway); the point where a COMMIT's reply is cut."""


def _split_at_commit_reply(link: _Link, data: bytes) -> tuple[bytes, bytes | None]:
    """The server's whole messages before its ``CommandComplete`` of a ``COMMIT`` (what it had
    answered before), and the bytes from that one on (None while it has not come; an
    incomplete last message waits in ``link.scan``). The reply to the client's burst starts
    at a message's start: the client read every earlier reply before it sent the burst.
    """
    buf = link.scan + data
    pos = 0
    while pos + 5 <= len(buf):
        end = pos + 1 + int.from_bytes(buf[pos + 1 : pos + 5], "big")
        if end > len(buf):
            break
        if buf[pos] == 0x43 and buf[pos + 5 : end].startswith(b"COMMIT"):  # 'C', its tag
            link.scan = b""
            return buf[:pos], buf[pos:]
        pos = end
    link.scan = buf[pos:]
    return buf[:pos], None


async def _refuse_at_cap(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer a connection as PostgreSQL does past a role's ``CONNECTION LIMIT``: decline SSL
    (and GSS) encryption, read the startup message, send ``FATAL 53300`` and close."""
    try:
        while True:
            (length,) = struct.unpack("!I", await reader.readexactly(4))
            body = await reader.readexactly(length - 4)
            code = struct.unpack("!I", body[:4])[0]
            if code in (80877103, 80877104):  # SSLRequest, GSSENCRequest
                writer.write(b"N")
                await writer.drain()
                continue
            break
        fields = b"".join(
            [
                b"SFATAL\0VFATAL\0C53300\0",
                b'Mtoo many connections for role "capped"\0',
                b"\0",
            ]
        )
        writer.write(b"E" + struct.pack("!I", len(fields) + 4) + fields)
        await writer.drain()
    except (ConnectionError, OSError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


@contextmanager
def proxied(base_url: str, *, delay_s: float = 0.0) -> Iterator[tuple[NetProxy, str]]:
    """A started proxy to ``base_url``'s server, and ``base_url`` pointed at it."""
    url = make_url(base_url)
    with NetProxy(url.host or "127.0.0.1", url.port or 5432, delay_s=delay_s) as proxy:
        yield proxy, proxy.url(base_url)
