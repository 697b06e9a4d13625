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

And **statements whose results no one reads wait for the next round trip** (``defer``): a
write that only has to happen before the transaction ends (a turn's entries, the head's move)
is bound client-side and queued; the next statement carries the queue in front of it in one
simple-protocol query, and the COMMIT carries what is left (``stmts; COMMIT``). A statement of
the queue that fails fails the transaction where it is flushed: the write is rolled back whole,
as before. ``db/raw.py`` does the batching; this class flushes the queue before anything else
the driver sends (a Core statement, a savepoint, the COMMIT) and drops it on ROLLBACK.

Imported only when a PostgreSQL archive is opened (psycopg is an optional dependency).
"""

from __future__ import annotations

import contextlib
import select
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import generators, pq

from alpstore.db.names import PG_PREPARED

Sink = Callable[[Any], None]
"""Handed a deferred statement's result (a ``pq.PGresult``) when it came."""

Queued = bytes | tuple[str, tuple[Any, ...]]
"""A queued statement: bound already (bytes), or its SQL (``%s`` markers) and parameters, bound
only when it is sent: client-side into a simple query, or as a prepared statement's
parameters in a pipeline (:meth:`BoundedConnection._alp_pipeline`)."""

CAN_PREPARE = callable(getattr(psycopg.Connection, "_deallocate", None))
"""Whether this psycopg sends its ``DEALLOCATE ALL`` through ``_deallocate`` (3.1–3.3 do), the hook
:meth:`BoundedConnection._deallocate` needs to forget the statements it takes with it. A
psycopg without it would leave names prepared here that the server no longer has, so nothing
is prepared then: every statement goes bound, as with ``alpstore_prepared=0``."""

_WIRE_TYPES = {bool: 16, float: 701, bytes: 17, bytearray: 17, memoryview: 17}
"""Parameter types as a client-side bound literal of the value would be typed (``true``,
``1.5::float8``, ``'\\x..'::bytea``); ints by their size, text and NULL unknown."""


def _wire(
    sql: str, params: tuple[Any, ...], encoding: str | None
) -> tuple[tuple[str, tuple[int, ...]], list[bytes | None], list[int]] | None:
    """``sql`` (``%s`` markers) and ``params`` as a prepared statement's: its key (the SQL and
    the parameters' types), the values as the server reads them (text; bytes binary), their
    formats. None when a value is of another type (or the markers do not match): it goes bound.
    """
    dollar = _dollar(sql)
    if dollar is None or dollar[1] != len(params):
        return None
    types: list[int] = []
    values: list[bytes | None] = []
    formats: list[int] = []
    for value in params:
        kind = type(value)
        if value is None:
            types.append(0)
            values.append(None)
        elif kind is int:
            types.append(
                23 if -(2**31) <= value < 2**31 else 20 if -(2**63) <= value < 2**63 else 1700
            )
            values.append(str(value).encode())
        elif kind is str:
            types.append(0)
            values.append(value.encode(encoding or "utf-8"))
        elif kind in _WIRE_TYPES:
            types.append(_WIRE_TYPES[kind])
            if kind is bool:
                values.append(b"t" if value else b"f")
            elif kind is float:
                values.append(repr(value).encode())
            else:
                values.append(bytes(value))
                formats.append(1)
                continue
        else:
            return None
        formats.append(0)
    return (sql, tuple(types)), values, formats


@lru_cache(maxsize=512)
def _dollar(sql: str) -> tuple[bytes, int] | None:
    """The ``%s`` markers of psycopg as ``$1``, ``$2`` … (``%%`` as ``%``), and how many; None for
    any other use of ``%``.
    """
    out: list[str] = []
    n = 0
    i = 0
    while True:
        j = sql.find("%", i)
        if j < 0:
            out.append(sql[i:])
            break
        out.append(sql[i:j])
        mark = sql[j + 1 : j + 2]
        if mark == "s":
            n += 1
            out.append(f"${n}")
        elif mark == "%":
            out.append("%")
        else:
            return None
        i = j + 2
    return "".join(out).encode(), n


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
    alp_deferred: list[Queued] | None = None
    """Statements bound client-side, to be sent in front of the next one (``defer``)."""
    alp_sinks: list[Sink | None] | None = None
    """For each queued statement, what is handed its result once it came (or None)."""

    def alp_defer(self, statement: Queued, sink: Sink | None = None) -> None:
        """Queue ``statement`` (one SQL statement) for the next round trip of this
        transaction; ``sink``, if given, is handed its result (a ``pq.PGresult``) when that
        round trip's reply came, before the call that sent it returns (a COMMIT's too).
        """
        if self._alp_sent is not None:  # streaming: into libpq's buffer, sent at the COMMIT
            with self.lock:
                self._alp_send(statement)
            self._alp_sent.append(sink)
            return
        if self.alp_deferred is None or self.alp_sinks is None:
            self.alp_deferred, self.alp_sinks = [], []
        self.alp_deferred.append(statement)
        self.alp_sinks.append(sink)

    alp_begun_later: bool = False
    """The queue starts with the transaction's ``BEGIN`` (:meth:`alp_begin_later`): nothing
    was sent yet; the driver's own ``BEGIN`` must not be."""
    alp_unsent: bool = False
    """A transaction begun later failed before any of it was sent: the connection was found
    gone first (nothing written; the caller may run it again on a fresh connection)."""
    alp_head: int = 0
    """With ``alp_begun_later``: how many queued statements (the ``BEGIN`` and the id's read)
    the server answers at once, before it runs the rest (a flush request after them)."""
    alp_stream: bool = True
    """Send a transaction begun later in two client writes (:meth:`_alp_stream_start`): its
    head at once, the rest with the COMMIT. False: all of it at the COMMIT, in one."""
    _alp_sent: list[Sink | None] | None = None
    """While a transaction begun later is streaming (the connection in pipeline mode, no Sync
    sent yet): for each statement handed to libpq, what is handed its result (or None)."""

    def alp_begin_later(self, statements: Sequence[Queued]) -> None:
        """Open a transaction with nothing sent: its ``BEGIN`` (and, for a write that wants it,
        ``SELECT txid_current()``) and ``statements`` are queued, and everything deferred after
        them goes with them. At the COMMIT all of it goes in ONE pipeline (:meth:`_alp_pipeline`:
        one client write, one wait); anything the driver sends before flushes it all in one
        simple query (a round trip, as usual). Only on an idle connection with nothing queued.
        """
        assert not self.alp_deferred and self.pgconn.transaction_status == pq.TransactionStatus.IDLE
        self.alp_defer(self._get_tx_start_command())
        if self.alp_want_xid:
            self.alp_want_xid = False
            self.alp_defer(b"SELECT txid_current()", self._alp_note_xid)
        self.alp_head = self.alp_waiting()
        for statement in statements:
            self.alp_defer(statement)
        self.alp_begun_later = True
        if self.alp_stream and not select.select([self.pgconn.socket], [], [], 0)[0]:
            with self.lock:
                self._alp_stream_start()

    def _alp_stream_start(self) -> None:
        """Send what :meth:`alp_begin_later` queued (the ``BEGIN``, the id's read, the guard)
        now, in pipeline mode with no Sync and no flush request: the server runs them (and
        wakes from its idle wait) while the client still compresses and binds the turn, and
        answers nothing yet. Each statement deferred after them goes into libpq's buffer
        (:meth:`alp_defer`) and leaves with the COMMIT (:meth:`_alp_stream_end`): one wait.
        Not when the server spoke first (its goodbye): the whole pipeline then goes at the
        COMMIT, whose check reports the connection gone with nothing sent.
        """
        pg = self.pgconn
        self._check_connection_ok()
        statements, sinks = self.alp_deferred or [], self.alp_sinks or []
        self.alp_deferred = self.alp_sinks = None
        self._alp_to_prepare = None
        self.alp_unsent = False
        pg.enter_pipeline_mode()
        self._alp_sent = list(sinks)
        for statement in statements:
            self._alp_send(statement)
        pg.flush()  # what the socket takes now (all of it, but for a huge guard): no wait

    def _alp_note_xid(self, result: Any) -> None:
        value = result.get_value(0, 0) if result.ntuples else None
        self.alp_xid = int(value) if value is not None else None

    def alp_take(self) -> bytes | None:
        """The queued statements as one query text (``a; b``), the queue emptied; None when
        nothing waits. Their sinks wait in ``alp_taken`` for :meth:`alp_deliver`.
        """
        self.alp_begun_later = False
        queue, self.alp_deferred = self.alp_deferred, None
        self.alp_taken, self.alp_sinks = tuple(self.alp_sinks or ()), None
        return b"; ".join(self._alp_text(q) for q in queue) if queue else None

    def _alp_text(self, statement: Queued) -> bytes:
        """``statement`` bound client-side (psycopg's own quoting), as bytes."""
        if isinstance(statement, bytes):
            return statement
        sql, params = statement
        text = psycopg.ClientCursor(self).mogrify(sql, params) if params else sql
        return text.encode(self.pgconn._encoding or "utf-8")

    alp_prepared_max: int = PG_PREPARED
    """How many statements this connection prepares at most (0: none, every one goes bound;
    the engine sets it from ``alpstore_prepared``; past it the rest go bound)."""
    _alp_prepared: dict[tuple[str, tuple[int, ...]], bytes] | None = None
    """Statements prepared on this connection: (SQL, parameter types) → their name."""
    _alp_unpreparable: set[tuple[str, tuple[int, ...]]]
    """Statements whose PREPARE the server refused on this connection: they go bound."""
    _alp_names: int = 0
    """Names given (``_alp_1`` …): never one twice, prepared or refused."""
    _alp_to_prepare: dict[tuple[str, tuple[int, ...]], bytes] | None = None
    """Seen in this pipeline, not prepared yet: prepared after its COMMIT (see below)."""

    def _alp_send(self, statement: Queued) -> None:
        """Send one statement of a pipeline: as a prepared statement's execution when this
        connection prepared its SQL (with these parameter types) in an earlier transaction;
        else bound, and its SQL noted to be prepared once this transaction is over.
        """
        pg = self.pgconn
        wire = None if isinstance(statement, bytes) else _wire(*statement, pg._encoding)
        if wire is None:
            pg.send_query_params(self._alp_text(statement), None)
            return
        key, values, formats = wire
        name = (self._alp_prepared or {}).get(key)
        if name is not None:
            pg.send_query_prepared(name, values, param_formats=formats)
            return
        pg.send_query_params(self._alp_text(statement), None)
        if self._alp_prepared is None:
            self._alp_prepared, self._alp_unpreparable = {}, set()
        if self._alp_to_prepare is None:
            self._alp_to_prepare = {}
        if (
            key not in self._alp_to_prepare
            and key not in self._alp_unpreparable
            and CAN_PREPARE
            and len(self._alp_prepared) + len(self._alp_unpreparable) < self.alp_prepared_max
        ):
            self._alp_names += 1
            self._alp_to_prepare[key] = f"_alp_{self._alp_names}".encode()

    alp_ended: type[BaseException] | None = None
    """Set by ``raw.fetch_and_end``: this read transaction was ended with its reads, so the
    next statement before the block's commit or rollback raises it, unsent (it would read
    another snapshot)."""

    alp_taken: tuple[Sink | None, ...] = ()
    """The sinks of the statements :meth:`alp_take` took last, in order."""

    def alp_deliver(self, results: Sequence[Any]) -> None:
        """Hand the results of the statements taken last (the first ``len(alp_taken)`` of
        ``results``) to their sinks.
        """
        sinks, self.alp_taken = self.alp_taken, ()
        for sink, result in zip(sinks, results, strict=False):
            if sink is not None:
                sink(result)

    def alp_waiting(self) -> int:
        """How many statements wait in the queue."""
        return len(self.alp_deferred) if self.alp_deferred else 0

    def _alp_run(self, query: bytes) -> Any:
        """Send ``query`` (several statements, simple protocol, the queue taken last in front)
        and wait for all its results; the first failed one raises, else the queue's sinks are
        handed theirs.
        """
        self._check_connection_ok()
        self.pgconn.send_query(query)
        results = yield from generators.execute(self.pgconn)
        for result in results:
            if result.status == pq.ExecStatus.FATAL_ERROR:
                self.alp_taken = ()
                raise pg_errors.error_from_result(result, encoding=self.pgconn._encoding)
        self.alp_deliver(results)
        return results

    def _alp_pipeline(self, statements: Sequence[Queued], sinks: Sequence[Sink | None]) -> Any:
        """A transaction begun later (:meth:`alp_begin_later`), whole, in one wait: every
        statement and the COMMIT sent in one client write (libpq pipeline mode, each statement
        parsed alone, one Sync at the end). A flush request after the first ``alp_head`` ones
        makes the server send the transaction's id before it runs the rest, so a COMMIT whose
        own reply is lost is still read back by that id. The first failed statement raises (the
        rest were skipped: the transaction is left failed for the caller's ROLLBACK); else each
        sink is handed its result.

        A statement this connection prepared in an earlier transaction runs prepared (no
        parse, no plan: the server's part of a turn's pipeline was ~1.2 ms, most of it
        planning); one not prepared yet goes bound, and is prepared after the COMMIT, in the
        same client write and wait: the COMMIT has run when the server reads it, so a PREPARE
        that fails (a parameter type the server cannot infer) fails nothing of the
        transaction (the pipeline's rest is skipped to the Sync), and the statement just goes
        on bound.
        """
        pg = self.pgconn
        head = self.alp_head
        self._check_connection_ok()
        self.alp_unsent = True
        if select.select([pg.socket], [], [], 0)[0]:  # the server spoke first: a goodbye?
            pg.consume_input()  # raises when the connection is gone (nothing of ours sent)
            if pg.status != pq.ConnStatus.OK:
                raise psycopg.OperationalError(
                    "the connection was closed before the transaction was sent"
                )
        self.alp_unsent = False
        pg.enter_pipeline_mode()
        results: list[Any] = []
        self._alp_to_prepare = None
        try:
            for i, statement in enumerate(statements):
                self._alp_send(statement)
                if i == head - 1:
                    pg.send_flush_request()
            pg.send_query_params(b"COMMIT", None)
            preparing: list[tuple[tuple[str, tuple[int, ...]], bytes]]
            preparing = list((self._alp_to_prepare or {}).items())
            self._alp_to_prepare = None
            for (sql, types), name in preparing:
                dollar = _dollar(sql)
                assert dollar is not None  # it had a key
                pg.send_prepare(name, dollar[0], param_types=types)
            pg.pipeline_sync()  # one Sync: it flushes, and the client writes once
            yield from generators.send(pg)
            yield from self._alp_collect(len(statements) + 1, preparing, results, sinks, head)
        finally:
            if pg.status == pq.ConnStatus.OK:
                with contextlib.suppress(psycopg.Error):
                    pg.exit_pipeline_mode()
        self._alp_hand_over(results, sinks, head)

    def _alp_stream_end(self, end: bytes | None) -> Any:
        """End a streaming transaction's pipeline (:meth:`_alp_stream_start`): a flush request
        (the statements' results, the transaction's id first, leave before ``end`` runs: a
        COMMIT whose own reply is lost is still read back by that id), ``end`` — ``COMMIT``
        with the PREPAREs of this transaction's new statements after it, ``ROLLBACK``, or None
        (the transaction goes on: another statement needs its reply) — and one Sync, in one
        client write with whatever libpq still holds, and one wait; then as
        :meth:`_alp_pipeline`.
        """
        pg = self.pgconn
        sinks, head = self._alp_sent or [], self.alp_head
        self._alp_sent, self.alp_begun_later, self.alp_taken = None, False, ()
        preparing = list((self._alp_to_prepare or {}).items()) if end == b"COMMIT" else []
        self._alp_to_prepare = None
        results: list[Any] = []
        try:
            self._check_connection_ok()
            if end is not None:
                pg.send_flush_request()
                pg.send_query_params(end, None)
            for (sql, types), name in preparing:
                dollar = _dollar(sql)
                assert dollar is not None  # it had a key
                pg.send_prepare(name, dollar[0], param_types=types)
            pg.pipeline_sync()
            yield from generators.send(pg)
            ours = len(sinks) + (end is not None)
            yield from self._alp_collect(ours, preparing, results, sinks, head)
        finally:
            if pg.status == pq.ConnStatus.OK:
                with contextlib.suppress(psycopg.Error):
                    pg.exit_pipeline_mode()
        self._alp_hand_over(results, sinks, head)

    def _alp_collect(
        self,
        ours: int,
        preparing: Sequence[tuple[tuple[str, tuple[int, ...]], bytes]],
        results: list[Any],
        sinks: Sequence[Sink | None],
        head: int,
    ) -> Any:
        """Read a pipeline's results up to its Sync: the transaction's ``ours`` into
        ``results`` (the first ``head`` handed to their sinks as they come: the id, at once,
        the rest may never come), then the PREPAREs' (``preparing``), noted as prepared or
        refused.
        """
        pg = self.pgconn
        seen = 0
        while True:
            result = yield from generators.fetch(pg)
            if result is None:
                continue
            if result.status == pq.ExecStatus.PIPELINE_SYNC:
                break
            seen += 1
            if seen > ours:  # a PREPARE's, after the COMMIT: never the transaction's
                key, name = preparing[seen - ours - 1]
                if self._alp_prepared is None:
                    continue
                if result.status == pq.ExecStatus.COMMAND_OK:
                    self._alp_prepared[key] = name
                elif result.status == pq.ExecStatus.FATAL_ERROR:  # not those skipped after it
                    self._alp_unpreparable.add(key)
                continue
            results.append(result)
            if len(results) <= head and result.status == pq.ExecStatus.TUPLES_OK:
                sink = sinks[len(results) - 1]
                if sink is not None:
                    sink(result)

    def _alp_hand_over(
        self, results: Sequence[Any], sinks: Sequence[Sink | None], head: int
    ) -> None:
        """Raise a pipeline's first failed result, else hand each result after the first
        ``head`` to its sink.
        """
        for result in results:
            if result.status == pq.ExecStatus.FATAL_ERROR:
                raise pg_errors.error_from_result(result, encoding=self.pgconn._encoding)
        for sink, result in zip(sinks[head:], results[head:], strict=False):
            if sink is not None:
                sink(result)

    def _deallocate(self, name: bytes | None) -> Any:
        """The driver's ``DEALLOCATE`` (None: ALL, which it sends after a ROLLBACK, a DROP or an
        ALTER once it prepared statements of its own): that takes this connection's prepared
        pipeline statements with it, so they are prepared again.
        """
        if name is None:
            self._alp_prepared = None
        return (yield from super()._deallocate(name))

    def _commit_gen(self) -> Any:
        self.alp_ended = None
        if self._alp_sent is not None:
            yield from self._alp_commit_or_roll_back(self._alp_stream_end(b"COMMIT"))
            return None
        if self.alp_begun_later and self.alp_deferred and not self._pipeline and not self._tpc:
            statements, sinks = self.alp_deferred, self.alp_sinks or []
            self.alp_deferred = self.alp_sinks = None
            self.alp_begun_later, self.alp_taken = False, ()
            yield from self._alp_commit_or_roll_back(self._alp_pipeline(statements, sinks))
            return None
        pending = self.alp_take()
        if (
            pending is None
            or self._pipeline
            or self._tpc
            or self._num_transactions
            or self.pgconn.transaction_status == pq.TransactionStatus.IDLE
        ):
            if pending is not None and self.pgconn.transaction_status != pq.TransactionStatus.IDLE:
                yield from self._alp_run(pending)
            self.alp_taken = ()
            return (yield from super()._commit_gen())
        yield from self._alp_commit_or_roll_back(self._alp_run(pending + b"; COMMIT"))
        return None

    def _alp_commit_or_roll_back(self, commit: Any) -> Any:
        """Run ``commit`` (a generator sending statements and the COMMIT). When it fails on a
        live connection (a queued statement refused: a constraint, a deadlock the server
        broke, a guard), the COMMIT after the failed statement never ran: the transaction is
        ended as a refused COMMIT ends it (rolled back), so the connection goes back to the
        pool clean, and the failure is raised. A broken connection is raised as it is: the
        caller reads back whether the transaction landed.
        """
        try:
            yield from commit
        except psycopg.Error:
            if self.pgconn.status != pq.ConnStatus.OK:
                raise
            if self.pgconn.transaction_status != pq.TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    yield from self._exec_command(b"ROLLBACK")
            raise

    def rollback(self) -> None:
        """The driver's rollback; on an idle connection with nothing queued or begun (the
        pool's reset of every connection it takes back) none of its locking and waiting: it
        would send nothing either.
        """
        if (
            self.pgconn.transaction_status == pq.TransactionStatus.IDLE
            and self._alp_sent is None
            and not self.alp_deferred
            and not self.alp_begun_later
            and not self._pipeline
            and not self._num_transactions
            and not self._tpc
        ):
            self.alp_ended = None
            self.alp_taken = ()
            return
        super().rollback()

    def _rollback_gen(self) -> Any:
        self.alp_ended = None
        if self._alp_sent is not None:  # begun on the server: rolled back in one wait
            with contextlib.suppress(psycopg.Error):
                yield from self._alp_stream_end(b"ROLLBACK")
        self.alp_deferred = self.alp_sinks = None  # never sent: nothing to undo
        self.alp_begun_later = False
        self.alp_taken = ()
        return (yield from super()._rollback_gen())

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
        ended = self.alp_ended
        if ended is not None and self.pgconn.transaction_status == pq.TransactionStatus.IDLE:
            raise ended("the read transaction was ended with its reads; not sent")
        if self._alp_sent is not None:  # what was sent answers first; the transaction goes on
            yield from self._alp_stream_end(None)
        pending = self.alp_take() if self.alp_deferred else None
        if pending is not None:  # anything else the driver sends goes after the queue
            yield from self._alp_run(pending)
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
