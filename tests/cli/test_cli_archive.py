from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import select, update

from alpstore.db import open_database
from alpstore.db.tables import blob_rows
from tests.conftest import run_cli


def test_put_twice_is_one_blob_and_get_returns_it(cli: Any, tmp_path: Path) -> None:
    doc = tmp_path / "m.json"
    doc.write_text(json.dumps({"role": "user", "content": "héllo", "n": [1, 2]}))
    first = cli("archive", "put", str(doc))
    second = cli("archive", "put", "-", input='{"n":[1,2],"content":"héllo","role":"user"}')
    assert first.code == 0 and second.code == 0, first.err + second.err
    assert first.out.strip() == second.out.strip()
    assert len(first.out.strip()) == 64
    stats = cli("archive", "stats", "--json")
    assert json.loads(stats.out)["blobs"] == 1
    got = cli("archive", "get", first.out.strip())
    assert json.loads(got.out) == {"role": "user", "content": "héllo", "n": [1, 2]}


def test_verify_names_the_flipped_blob(cli: Any, run_root: Path) -> None:
    digests = [
        cli("archive", "put", "-", input=json.dumps({"i": i, "t": "x" * 200})).out.strip()
        for i in range(3)
    ]
    assert cli("archive", "verify").code == 0
    db = open_database(root=run_root)  # the SQLite file, or the PostgreSQL schema of this root
    where = blob_rows.c.digest == bytes.fromhex(digests[1])
    with db.atomic() as conn:
        damaged = bytearray(conn.execute(select(blob_rows.c.payload).where(where)).scalar_one())
        damaged[len(damaged) // 2] ^= 0x5A
        conn.execute(update(blob_rows).where(where).values(payload=bytes(damaged)))
    db.close()
    result = cli("archive", "verify")
    assert result.code != 0
    assert digests[1] in result.out
    assert digests[0] not in result.out and digests[2] not in result.out
    got = cli("archive", "get", digests[1])
    assert got.code != 0 and "Traceback" not in got.err


def test_bad_input_is_one_line_and_writes_nothing(cli: Any, run_root: Path) -> None:
    for args, stdin in [
        (("archive", "put", "-"), "{not json"),
        (("archive", "put", "-"), '{"x": NaN}'),
        (("archive", "put", "/nonexistent/file.json"), None),
        (("archive", "get", "abc"), None),
        (("archive", "get", "00" * 32), None),
    ]:
        result = cli(*args, input=stdin)
        assert result.code != 0, args
        assert "Traceback" not in result.err
        assert result.err.startswith("alpstore: error:"), result.err
    assert not (run_root / "traces").exists()
    assert "no archive" in cli("archive", "stats").err


def test_unreadable_root_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = run_cli("--root", str(blocker), "archive", "put", "-", input="{}")
    assert result.code != 0
    assert "Traceback" not in result.err and str(blocker) in result.err


def test_train_dict_and_gc(cli: Any) -> None:
    for i in range(20):
        cli("archive", "put", "-", input=json.dumps({"role": "tool", "content": f"log {i} " * 30}))
    trained = cli("archive", "train-dict", "--size", "2048")
    assert trained.code == 0, trained.err
    assert "trained from 20 blobs" in trained.out
    dry = cli("archive", "gc", "--dry-run")
    assert "would remove 20 blobs" in dry.out
    assert json.loads(cli("archive", "stats", "--json").out)["blobs"] == 20
    assert "removed 20 blobs" in cli("archive", "gc").out
    assert cli("archive", "verify").code == 0
