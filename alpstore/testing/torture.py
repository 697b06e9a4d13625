"""The kill -9 torture engine: start a worker, SIGKILL it at a random moment, check, repeat.

Workers are forked from a ``forkserver`` that imported alpstore once, so a new worker costs a
fork and an archive open (milliseconds), not an interpreter start; each is a real process killed
with SIGKILL. After every kill the parent checks, with the worker's log (see
:mod:`alpstore.testing.workload`):

* the archive verifies (every blob re-hashed, every view and reference checked);
* every acknowledged checkpoint exists and hydrates, digests verified, to exactly the history the
  worker logged, with the kernel state it logged;
* no half-written checkpoint is visible: every checkpoint written since the last kill hydrates
  whole, and the write in flight either happened entirely or not at all (each session's head is
  its last acknowledged state or the state the interrupted write would produce);
* each execution's ``checkpoint.json`` verifies and holds every acknowledged pin and nothing that
  was never pinned; every acknowledged journal line is still there;
* every line of the journal and of ``traces/events.jsonl`` is JSON, but the one a kill cut (it
  ends at a page boundary: Linux stops a write there once SIGKILL is pending).

Runs are seeded: the seed fixes every worker's operations and every kill delay (where exactly a
kill lands still depends on the machine's timing). Every ``epoch`` kills the engine starts a fresh
run root, so the checks stay cheap however many kills are asked for.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.pool import NullPool

from alpstore.continuity.checkpoint import read_checkpoint
from alpstore.continuity.journal import replay
from alpstore.continuity.paths import ExecutionPaths
from alpstore.db import sqlite_path_for_root
from alpstore.errors import AlpstoreError, NotFoundError
from alpstore.maintenance import verify
from alpstore.sessions import CheckpointInfo
from alpstore.store import Store
from alpstore.testing.workload import EXECUTIONS, WorkerSpec, history_digest, worker_main

READY_TIMEOUT = 60.0
"""Seconds a worker may take to open the archive and load its model."""
BACKEND_TIMEOUT = 30.0
"""Seconds the PostgreSQL server may take to end a killed worker's backends."""
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
"""Where a write cut by SIGKILL can end: Linux copies a write page by page and stops at a page
boundary once the signal is pending."""


@dataclass(frozen=True)
class TortureConfig:
    """How a torture run goes.

    Attributes:
        workdir: an empty folder for run roots, ALP homes and worker logs.
        kills: how many workers to kill.
        seed: fixes every operation and every delay.
        epoch: kills per run root before starting a fresh one.
        min_delay: shortest time a worker runs before its kill (seconds).
        max_delay: longest usual time before a kill.
        long_every: one kill in this many waits up to ``long_delay`` instead (lets slow writes,
            such as training the zstd dictionary, finish sometimes).
        long_delay: the longest wait.
        early_every: one kill in this many is timed from the fork, not from ``ready``, so it
            may land while the archive is being opened or created.
        database_url: maps a run root to the URL of an empty database for its archive (e.g. a
            fresh PostgreSQL schema); None keeps each archive in its run root's SQLite file.
    """

    workdir: Path
    kills: int = 200
    seed: int = 0
    epoch: int = 40
    min_delay: float = 0.005
    max_delay: float = 0.080
    long_every: int = 10
    long_delay: float = 0.400
    early_every: int = 7
    database_url: Callable[[Path], str] | None = None


@dataclass
class TortureReport:
    """What a run did and what it found (``failures`` empty means every check passed)."""

    kills: int = 0
    epochs: int = 0
    early_kills: int = 0
    acks: dict[str, int] = field(default_factory=dict)
    checkpoints_verified: int = 0
    in_flight_resolved: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        """One paragraph for a log or a test failure."""
        acks = ", ".join(f"{k} {v}" for k, v in sorted(self.acks.items()))
        flight = ", ".join(f"{k} {v}" for k, v in sorted(self.in_flight_resolved.items()))
        return (
            f"{self.kills} kills ({self.early_kills} timed from fork) in {self.epochs} run roots, "
            f"{self.seconds:.1f} s; acknowledged: {acks}; checkpoints verified: "
            f"{self.checkpoints_verified}; writes in flight at a kill: {flight or 'none'}; "
            f"failures: {len(self.failures)}"
        )


@dataclass
class _Pending:
    """A write logged as intended but not acknowledged when the worker died."""

    h: str
    ck_h: str | None
    new: bool


@dataclass
class _Execution:
    """The parent's model of one continuity execution."""

    pins: dict[str, str] = field(default_factory=dict)
    pin_in_flight: str | None = None
    unpin_in_flight: str | None = None
    journal: dict[str, int] = field(default_factory=dict)
    """Journal keys that must be present → rotations left before they may be dropped."""
    ever: set[str] = field(default_factory=set)
    line_in_flight: str | None = None
    rotation_in_flight: bool = False


class _Model:
    """Everything the parent expects one run root to hold."""

    def __init__(self, root: Path, home: Path, url: str | None = None) -> None:
        self.root = root
        self.home = home
        self.url = url
        self.heads: dict[str, str] = {}
        self.checkpoints: dict[int, tuple[str, str, str | None]] = {}
        self.checked_up_to = 0
        self.executions = {name: _Execution() for name in EXECUTIONS}


class TortureFailure(AssertionError):
    """A check after a kill failed (the message says which and where)."""


def _read_log(path: Path) -> list[dict[str, Any]]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    # The last element is empty, or the line the kill cut: even one ``write`` a line is cut at
    # a page boundary when SIGKILL is pending. The worker died in that write, so what it
    # records did not happen yet (an intent) or is in flight (an ack), as when the kill
    # comes just before the write.
    return [json.loads(line) for line in data.split(b"\n")[:-1] if line]


class Torture:
    """One torture run, a kill at a time; :func:`run` drives it to the end."""

    def __init__(self, config: TortureConfig) -> None:
        self.config = config
        self.report = TortureReport()
        self.rng = random.Random(config.seed)
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(["alpstore.testing.warm"])
        self.model: _Model | None = None
        self.logs = config.workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.done = 0

    def kill_once(self) -> Path:
        """Start a worker, kill it, check the run root; return the worker's log.

        Raises:
            TortureFailure: a check failed.
        """
        config, kill = self.config, self.done
        if kill % config.epoch == 0:
            self.finish_epoch()
            epoch = kill // config.epoch
            root = config.workdir / f"root-{epoch}"
            url = config.database_url(root) if config.database_url else None
            self.model = _Model(root, config.workdir / f"alp-home-{epoch}", url)
            self.model.root.mkdir()
            self.model.home.mkdir()
            self.report.epochs += 1
        assert self.model is not None
        log_path = self.logs / f"worker-{kill:05d}.jsonl"
        spec = WorkerSpec(
            root=str(self.model.root),
            alp_home=str(self.model.home),
            seed=self.rng.getrandbits(64),
            worker=kill,
            log_path=str(log_path),
            url=self.model.url,
            application_name=f"alpstore-torture-{os.getpid()}-{kill}" if self.model.url else None,
        )
        early = config.early_every > 0 and kill % config.early_every == config.early_every - 1
        if config.long_every > 0 and self.rng.randrange(config.long_every) == 0:
            delay = self.rng.uniform(config.min_delay, config.long_delay)
        else:
            delay = self.rng.uniform(config.min_delay, config.max_delay)
        self.done += 1
        _kill_one(self.ctx, spec, delay=delay, early=early, report=self.report)
        check_log(self.model, log_path, self.report)
        return log_path

    def finish_epoch(self) -> None:
        """Check every checkpoint acknowledged on the current run root once more."""
        if self.model is not None:
            _final_check(self.model, self.report)


def run(config: TortureConfig, *, progress: Callable[[str], None] | None = None) -> TortureReport:
    """Run the torture; return the report (failures listed, the first one stops the run)."""
    started = time.monotonic()
    torture = Torture(config)
    try:
        for kill in range(config.kills):
            torture.kill_once()
            torture.report.seconds = time.monotonic() - started
            if progress is not None and (kill + 1) % 20 == 0:
                progress(f"{kill + 1}/{config.kills} kills; {torture.report.summary()}")
        torture.finish_epoch()
    except TortureFailure as failure:
        torture.report.failures.append(str(failure))
    torture.report.seconds = time.monotonic() - started
    return torture.report


def _kill_one(
    ctx: Any, spec: WorkerSpec, *, delay: float, early: bool, report: TortureReport
) -> None:
    ready = ctx.Event()
    process = ctx.Process(target=worker_main, args=(spec, ready), daemon=True)
    process.start()
    if early:
        report.early_kills += 1
    else:
        deadline = time.monotonic() + READY_TIMEOUT
        while not ready.wait(0.02):
            if process.exitcode is not None or time.monotonic() > deadline:
                process.kill()
                process.join()
                raise TortureFailure(
                    f"worker {spec.worker} never became ready (status {process.exitcode}): "
                    + _error(spec)
                )
    time.sleep(delay)
    if process.exitcode is not None:
        raise TortureFailure(
            f"worker {spec.worker} ended by itself (status {process.exitcode}): {_error(spec)}"
        )
    os.kill(process.pid, signal.SIGKILL)
    process.join()
    report.kills += 1
    if process.exitcode != -signal.SIGKILL:
        raise TortureFailure(
            f"worker {spec.worker} ended with status {process.exitcode}: {_error(spec)}"
        )
    if spec.url is not None and spec.application_name is not None:
        _wait_for_backends(spec.url, spec.application_name)


def _wait_for_backends(url: str, application_name: str) -> None:
    """Wait until the PostgreSQL server has ended every backend of a killed worker.

    A SIGKILL ends the client, not its server process: a COMMIT the worker sent just before it
    died may still be carried out after the parent's check has begun, so the check would see the
    archive before that commit and the next worker after it. Once the backends are gone, every
    transaction of the worker has committed or rolled back.
    """
    engine = sa.create_engine(url, poolclass=NullPool)
    deadline = time.monotonic() + BACKEND_TIMEOUT
    try:
        with engine.connect() as conn:
            while True:
                left = conn.execute(
                    sa.text("SELECT count(*) FROM pg_stat_activity WHERE application_name = :name"),
                    {"name": application_name},
                ).scalar_one()
                conn.rollback()  # a new snapshot of pg_stat_activity at the next poll
                if not left:
                    return
                if time.monotonic() > deadline:
                    raise TortureFailure(
                        f"{application_name}: {left} server backends still running "
                        f"{BACKEND_TIMEOUT:.0f} s after the kill"
                    )
                time.sleep(0.005)
    finally:
        engine.dispose()


def _error(spec: WorkerSpec) -> str:
    for line in _read_log(Path(spec.log_path)):
        if line["t"] == "error":
            return str(line["error"])
    return "no error logged"


def _count(report: TortureReport, key: str, table: str = "acks") -> None:
    counts: dict[str, int] = getattr(report, table)
    counts[key] = counts.get(key, 0) + 1


def check_log(model: _Model, log_path: Path, report: TortureReport) -> None:
    """Check the run root after one kill against everything acknowledged so far."""
    lines = _read_log(log_path)
    pending: dict[str, _Pending] = {}
    new_acks: list[int] = []
    for line in lines:
        kind = line["t"]
        if kind in ("ready", "error", "intent") or kind.endswith("-intent"):
            if kind == "error":
                raise TortureFailure(f"{log_path.name}: worker failed: {line['error']}")
            if kind == "intent":
                pending[line["session"]] = _Pending(line["h"], line["ck_h"], line["new"])
            _continuity_intent(model, line)
            continue
        _count(report, kind)
        if kind == "head":
            model.heads[line["session"]] = line["h"]
            pending.pop(line["session"], None)
        elif kind == "ck":
            model.checkpoints[int(line["id"])] = (line["session"], line["h"], line["kernel"])
            new_acks.append(int(line["id"]))
        else:
            _continuity_ack(model, line)
    where = f"after kill {log_path.stem}"
    store = _open_existing(model)
    if store is not None:
        with store:
            _check_archive(store, model, pending, new_acks, where, report)
    elif model.heads or (pending and any(not p.new for p in pending.values())):
        raise TortureFailure(f"{where}: the archive is gone")
    _check_events(model.root, where)
    for name in EXECUTIONS:
        _check_execution(model, name, where, report)


def _check_archive(
    store: Store,
    model: _Model,
    pending: dict[str, _Pending],
    new_acks: list[int],
    where: str,
    report: TortureReport,
) -> None:
    result = verify(store)
    if not result.ok:
        raise TortureFailure(
            f"{where}: archive verify failed: " + "; ".join(p.line() for p in result.problems)
        )
    for ck_id in new_acks:
        _check_acked(store, model, ck_id, where)
        report.checkpoints_verified += 1
    sessions = {info.uuid: info for info in store.list_sessions()}
    newest_id = model.checked_up_to
    for info in sessions.values():
        for ck in store.list_checkpoints(info.id, include_abandoned=True):
            if ck.id > model.checked_up_to:
                _hydrate(store, ck.id, where)  # nothing half-written
                newest_id = max(newest_id, ck.id)
    for uuid, info in sessions.items():
        actual = history_digest([e.digest for e in store.hydrate_view(info.head, verify=True)])
        flight = pending.get(uuid)
        if uuid not in model.heads and flight is None:
            raise TortureFailure(f"{where}: session {uuid} exists but was never logged")
        allowed = {model.heads.get(uuid), flight.h if flight else None} - {None}
        if actual not in allowed:
            raise TortureFailure(
                f"{where}: session {uuid} head is {actual[:12]}, expected one of "
                + ", ".join(a[:12] for a in allowed if a)
            )
        if flight is not None:
            happened = actual == flight.h and (
                actual != model.heads.get(uuid) or flight.ck_h is not None
            )
            _count(report, "done" if happened else "not done", "in_flight_resolved")
            if flight.ck_h is not None:
                _check_in_flight_checkpoint(store, model, info.id, uuid, flight.ck_h, where)
        model.heads[uuid] = actual
    for uuid, flight in pending.items():
        if uuid not in sessions:
            if not flight.new:
                raise TortureFailure(f"{where}: session {uuid} disappeared")
            _count(report, "not done", "in_flight_resolved")
    for uuid in model.heads:
        if uuid not in sessions:
            raise TortureFailure(f"{where}: acknowledged session {uuid} is missing")
    model.checked_up_to = newest_id


def _check_in_flight_checkpoint(
    store: Store, model: _Model, session_id: int, uuid: str, ck_h: str, where: str
) -> None:
    """A checkpoint nobody acknowledged, written by the interrupted write, must be its whole."""
    unacked = [
        ck
        for ck in store.list_checkpoints(session_id, include_abandoned=True)
        if ck.id not in model.checkpoints and ck.id > model.checked_up_to
    ]
    if len(unacked) > 1:
        raise TortureFailure(
            f"{where}: session {uuid} has {len(unacked)} unacknowledged checkpoints"
        )
    if unacked:
        got = _hydrate(store, unacked[0].id, where)
        if got != ck_h:
            raise TortureFailure(
                f"{where}: in-flight checkpoint {unacked[0].id} of {uuid} hydrates to "
                f"{got[:12]}, expected {ck_h[:12]}"
            )


def _hydrate(store: Store, ck_id: int, where: str) -> str:
    return _load(store, ck_id, where)[0]


def _load(store: Store, ck_id: int, where: str) -> tuple[str, CheckpointInfo]:
    """Hydrate a checkpoint with digests verified, and load its state blobs."""
    try:
        ck = store.get_checkpoint(ck_id)
        entries = store.hydrate(ck, verify=True)
        store.checkpoint_state(ck)
    except AlpstoreError as err:
        raise TortureFailure(f"{where}: checkpoint {ck_id} does not load: {err}") from err
    return history_digest([e.digest for e in entries]), ck


def _check_acked(store: Store, model: _Model, ck_id: int, where: str) -> None:
    session, h, kernel = model.checkpoints[ck_id]
    got, ck = _load(store, ck_id, where)
    if ck.session != session or got != h:
        raise TortureFailure(
            f"{where}: acknowledged checkpoint {ck_id} of {session} hydrates to {got[:12]} "
            f"in {ck.session}, the worker logged {h[:12]}"
        )
    got_kernel = ck.kernel_digest.hex() if ck.kernel_digest else None
    if got_kernel != kernel:
        raise TortureFailure(f"{where}: checkpoint {ck_id} kernel {got_kernel}, logged {kernel}")


def _check_events(root: Path, where: str) -> None:
    _cut_lines(root / "traces" / "events.jsonl", where)


def _cut_lines(path: Path, where: str) -> int:
    """How many lines of ``path`` a kill cut (they do not parse, and each ends at a page
    boundary, where a kill cuts: see ``events.after_torn_tail``).

    Raises:
        TortureFailure: a line that does not parse ends anywhere else: damage.
    """
    if not path.exists():
        return 0
    cut, end = 0, -1
    for number, line in enumerate(path.read_bytes().split(b"\n"), 1):
        end += len(line) + 1  # where the line ends in the file
        if not line:
            continue
        try:
            json.loads(line)
        except ValueError as err:
            if end % PAGE_SIZE:
                raise TortureFailure(f"{where}: {path.name} line {number} is torn: {err}") from err
            cut += 1
    return cut


# -------------------------------------------------------------------- continuity
def _continuity_intent(model: _Model, line: dict[str, Any]) -> None:
    kind = line["t"]
    if kind not in ("pin-intent", "unpin-intent", "jl-intent", "rot-intent"):
        return
    ex = model.executions[line["exec"]]
    if kind == "pin-intent":
        ex.pin_in_flight = line["text"]
    elif kind == "unpin-intent":
        ex.unpin_in_flight = line["id"]
    elif kind == "jl-intent":
        ex.line_in_flight = line["key"]
        ex.ever.add(line["key"])
    else:
        ex.rotation_in_flight = True


def _continuity_ack(model: _Model, line: dict[str, Any]) -> None:
    kind = line["t"]
    if kind == "gc":
        return
    ex = model.executions[line["exec"]]
    if kind == "pin":
        ex.pins[line["id"]] = line["text"]
        ex.pin_in_flight = None
    elif kind == "unpin":
        ex.pins.pop(line["id"], None)
        ex.unpin_in_flight = None
    elif kind == "jl":
        ex.journal[line["key"]] = 2
        ex.line_in_flight = None
    elif kind == "rot":
        ex.journal = {k: n - 1 for k, n in ex.journal.items() if n > 1}
        ex.rotation_in_flight = False


def _journal_keys(path: Path) -> set[str]:
    keys: set[str] = set()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return keys
    for line in data.split(b"\n"):
        if line.strip():
            keys.add(json.loads(line)["source"]["session_id"])
    return keys


def _check_execution(model: _Model, name: str, where: str, report: TortureReport) -> None:
    ex = model.executions[name]
    paths = ExecutionPaths.of(model.home, name)
    try:
        current = read_checkpoint(paths)
    except AlpstoreError as err:
        raise TortureFailure(f"{where}: {name} checkpoint.json does not verify: {err}") from err
    present = {pin.id: pin.text for _, pin in current.all_pins()} if current else {}
    for pin_id, text in ex.pins.items():
        if pin_id not in present and pin_id != ex.unpin_in_flight:
            raise TortureFailure(f"{where}: {name} lost acknowledged pin {pin_id} ({text!r})")
    extra = [text for pin_id, text in present.items() if pin_id not in ex.pins]
    if extra and (len(extra) > 1 or extra[0] != ex.pin_in_flight):
        raise TortureFailure(f"{where}: {name} holds pins nobody pinned: {extra}")
    if ex.pin_in_flight is not None or ex.unpin_in_flight is not None:
        _count(report, "pin", "in_flight_resolved")
    ex.pins = present
    ex.pin_in_flight = ex.unpin_in_flight = None
    # the journal: nothing torn but a line a kill cut, nothing acknowledged lost, nothing
    # invented
    result = replay(paths)
    cut = _cut_lines(paths.journal, where) + _cut_lines(paths.journal_rotated, where)
    if result.dropped_lines > cut:
        raise TortureFailure(f"{where}: {name} journal has {result.dropped_lines} bad line(s)")
    current_keys = _journal_keys(paths.journal)
    rotated_keys = _journal_keys(paths.journal_rotated)
    for key, left in ex.journal.items():
        if key in current_keys or key in rotated_keys:
            continue
        if not (ex.rotation_in_flight and left == 1):
            raise TortureFailure(f"{where}: {name} journal lost acknowledged line {key}")
    invented = (current_keys | rotated_keys) - ex.ever
    if invented:
        raise TortureFailure(f"{where}: {name} journal holds lines never written: {invented}")
    ex.journal = {k: 2 for k in current_keys} | {k: 1 for k in rotated_keys - current_keys}
    ex.line_in_flight = None
    ex.rotation_in_flight = False


def _open_existing(model: _Model) -> Store | None:
    """The model's archive, or None when no worker got as far as creating it."""
    if model.url is None and not sqlite_path_for_root(model.root).exists():
        return None
    try:
        return Store.open(model.root, url=model.url, create=False)
    except NotFoundError:
        if model.url is None:
            raise
        return None


def _final_check(model: _Model, report: TortureReport) -> None:
    """At the end of a run root: every checkpoint ever acknowledged, once more."""
    if not model.checkpoints:
        return
    with Store.open(model.root, url=model.url, create=False) as store:
        for ck_id in model.checkpoints:
            _check_acked(store, model, ck_id, f"end of {model.root.name}")
            report.checkpoints_verified += 1


__all__ = ["Torture", "TortureConfig", "TortureFailure", "TortureReport", "check_log", "run"]
