"""The loopback proxy itself (netproxy.py) against a plain TCP receiver: every burst arrives
``delay_s`` after it was sent, whatever the other bursts do, as on a real network. No database.
"""

from __future__ import annotations

import socket
import statistics
import threading
import time

from tests.postgres.netproxy import NetProxy

DELAY_S = 0.002
GAP_S = 0.0002
BURSTS = 20


def _sleep_until(due: float) -> None:
    while (left := due - time.perf_counter()) > 0:
        time.sleep(left - 0.0002 if left > 0.0004 else 0)


def _one_run(proxy: NetProxy, listener: socket.socket) -> list[float]:
    """Send ``BURSTS`` one-byte-tagged bursts ``GAP_S`` apart through ``proxy``; each one's
    transit time (its first byte's arrival at the receiver minus its send)."""
    arrived: dict[int, float] = {}

    def receive() -> None:
        conn, _ = listener.accept()
        with conn:
            got = 0
            while got < BURSTS * 16:
                data = conn.recv(65536)
                now = time.perf_counter()
                if not data:
                    break
                for b in set(data):
                    arrived.setdefault(b - 65, now)
                got += len(data)

    receiver = threading.Thread(target=receive, daemon=True)
    receiver.start()
    sent: list[float] = []
    with socket.create_connection(("127.0.0.1", proxy.port)) as client:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        time.sleep(0.01)  # the proxy connected to the receiver
        start = time.perf_counter()
        for i in range(BURSTS):
            _sleep_until(start + i * GAP_S)
            sent.append(time.perf_counter())
            client.sendall(bytes([65 + i]) * 16)
        receiver.join(5)
    assert len(arrived) == BURSTS, sorted(arrived)
    return [arrived[i] - sent[i] for i in range(BURSTS)]


def test_bursts_in_flight_together_each_arrive_one_delay_after_their_send() -> None:
    """Twenty bursts 0.2 ms apart at 2 ms one way: each arrives ≈ 2 ms after it was sent. The
    proxy that waited out each delivery's last 1.5 ms on its event loop's thread read none of
    the bursts sent meanwhile, so they arrived up to 1.8 ms late (a pipeline written in
    several bursts paid a whole delay more). The best of three runs, the machine being shared."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        with NetProxy("127.0.0.1", listener.getsockname()[1], delay_s=DELAY_S) as proxy:
            runs = [_one_run(proxy, listener) for _ in range(3)]
    late = min(runs, key=statistics.median)
    assert min(late) >= DELAY_S * 0.95, [f"{t * 1000:.2f}" for t in late]
    # the median, between this proxy on a loaded machine (2.2-2.5 ms beside a test run, a
    # burst now and then over 3.5 ms when a thread wakes late) and the old one's whole extra
    # delay (median ~4 ms)
    assert statistics.median(late) < DELAY_S + 0.0009, [f"{t * 1000:.2f}" for t in late]
