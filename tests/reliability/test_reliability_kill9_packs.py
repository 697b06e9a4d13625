"""Kill -9 during packing, repacking and GC (issue 33): a worker that writes turns, stores
orphans, packs (itself, and on its background packer thread), collects and repacks in a loop
is SIGKILLed at random moments; after every kill
each checkpoint it acknowledged (and every one from before) hydrates to what was written, and
`verify` finds nothing wrong. Both backends (a schema of its own on PostgreSQL).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from alpstore.maintenance import verify
from tests.conftest import Backend

KILLS = int(os.environ.get("ALPSTORE_PACK_TORTURE_KILLS", "12"))

WORKER = r"""
import hashlib, json, os, sys
from pathlib import Path
from alpstore.maintenance import gc
from alpstore.samples import generate
from alpstore.store import Store
import alpstore.archive.sql as archive_sql
import alpstore.archive.training as training

# the background packer runs beside the explicit packing: a long-lived writer's thread
archive_sql.PACK_EVERY, archive_sql.PACK_KEEP_LOOSE = 40, 8
archive_sql.PACK_EVERY_POSTGRESQL = 40  # (it also merges the session's small runs)
training.RECLAIM_IDLE = 0.0

root, url, log, seed = Path(sys.argv[1]), sys.argv[2] or None, sys.argv[3], int(sys.argv[4])
store = Store.open(root, url=url)
session = store.get_session("torture")
messages = list(generate(40, seed=seed))
fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
i = 0
print("ready", flush=True)
while True:
    turn = [dict(m, n=f"{seed}-{i}") for m in messages[i % 30 : i % 30 + 4]]
    ck = session.commit_turn(turn)
    values = [e.value for e in store.hydrate(ck)]  # as written (read back before any packing)
    digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()
    os.write(fd, (json.dumps({"ck": ck.id, "digest": digest}) + "\n").encode())
    os.fsync(fd)
    store.archive.put_many([{"orphan": f"{seed}-{i}-{k}", "pad": "x" * 900} for k in range(20)])
    if i % 3 == 0:
        store.archive.pack_cold()
    if i % 2:
        gc(store)
    i += 1
"""


def _digest(values: list[object]) -> str:
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()


def test_kill9_while_packing_loses_nothing(backend: Backend, tmp_path: Path) -> None:
    store = backend.open_store()
    store.create_session(name="torture")
    store.close()
    log = tmp_path / "acks.jsonl"
    rng = random.Random(33)
    expected: dict[int, str] = {}
    env = dict(os.environ)
    for kill in range(KILLS):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                WORKER,
                str(backend.root),
                backend.url or "",
                str(log),
                str(kill),
            ],
            stdout=subprocess.PIPE,
            env=env,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.2, 2.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        check = backend.open_store()
        try:
            for line in log.read_text().splitlines():
                ack = json.loads(line)
                expected[ack["ck"]] = ack["digest"]
            for ck_id, want in expected.items():
                got = _digest([e.value for e in check.hydrate(check.get_checkpoint(ck_id))])
                assert got == want, f"checkpoint {ck_id} does not hydrate to what was written"
            report = verify(check)
            assert report.ok, "\n".join(p.line() for p in report.problems)
        finally:
            check.close()
            backend._opened.remove(check)
    assert len(expected) >= KILLS  # the worker did real work between kills
    final = backend.open_store()
    assert final.archive.stats().frames > 0
