"""The psycopg connection alpstore's PostgreSQL engine opens (``engine.postgresql_engine``):
psycopg 3's own, with two additions a database across a network needs.

- **Every wait for the server is bounded** (``call_timeout``): psycopg waits for a reply with no
  limit of its own, so a connection that stops answering (a stalled proxy, a partition behind a
  middlebox that keeps acknowledging) would block a turn for as long as TCP lets it — hours. A
  wait past the bound closes the connection and raises an ``OperationalError`` that names the
  bound; the pool replaces the connection.
- **A write transaction learns its id for free** (``alp_want_xid``): psycopg opens a transaction
  with a ``BEGIN`` round trip of its own before the first statement; when asked, that same round
  trip carries ``BEGIN; SELECT txid_current()`` instead. After a COMMIT whose reply was lost,
  ``txid_status`` of that id on a fresh connection says whether the transaction landed
  (``database.Database`` reads it back) instead of guessing.

Imported only when a PostgreSQL archive is opened (psycopg is an optional dependency).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import generators, pq

_WAIT_TIMEOUT: type[BaseException] = getattr(pg_errors, "_WaitTimeout", psycopg.OperationalError)

CALL_TIMEOUT_MARKER = "no reply from the server within"
"""The start of the message of a wait cut by ``call_timeout`` (failures.py names the bound)."""


class BoundedConnection(psycopg.Connection[Any]):
    """A psycopg connection whose waits are bounded and whose write transactions know their id."""

    call_timeout: float | None = None
    """Seconds any one wait for the server may last (None: unbounded, psycopg's own way)."""
    alp_want_xid: bool = False
    """Set before a write transaction: its ``BEGIN`` also reads the transaction's id."""
    alp_xid: int | None = None
    """The id of the current write transaction (when ``alp_want_xid`` was set at its start)."""

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        """The driver's wait, bounded by ``call_timeout`` unless the caller bounds it."""
        bound = self.call_timeout if timeout is None else timeout
        try:
            return super().wait(gen, interval, bound)
        except _WAIT_TIMEOUT as err:
            if timeout is not None:  # psycopg's own bounded wait (a cancel): its error
                raise
            self.pgconn.finish()  # mid-reply: nothing on this connection can be trusted
            raise psycopg.OperationalError(
                f"{CALL_TIMEOUT_MARKER} {bound:g} s (alpstore_call_timeout); "
                "the connection was closed"
            ) from err

    def _start_query(self) -> Any:
        if (
            not self.alp_want_xid
            or self._autocommit
            or self._pipeline
            or self.pgconn.transaction_status != pq.TransactionStatus.IDLE
        ):
            return (yield from super()._start_query())
        self.alp_want_xid = False
        self._check_connection_ok()
        self.pgconn.send_query(self._get_tx_start_command() + b"; SELECT txid_current()")
        results = yield from generators.execute(self.pgconn)
        for result in results:
            if result.status == pq.ExecStatus.FATAL_ERROR:
                raise pg_errors.error_from_result(result, encoding=self.pgconn._encoding)
        last = results[-1] if results else None
        if last is not None and last.status == pq.ExecStatus.TUPLES_OK:
            value = last.get_value(0, 0)
            self.alp_xid = int(value) if value is not None else None
        return None
