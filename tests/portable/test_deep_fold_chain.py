"""Issue 39 case 5 and its "done when": a chain of folds nests summaries as deep as it is long.
1,000 rolling folds through the public API made `checkpoint export` exit 70 (RecursionError in
the walk over covered entries); a 10,000-deep chain now exports and imports (session file and
checkpoint file), on both backends: every walk over summaries is iterative.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import blake3
import pytest

from alpstore.archive.base import summary_document
from alpstore.codec import canonical_json
from alpstore.portable.travel_format import Digester
from alpstore.store import Store
from tests.conftest import Backend, run_cli


def _chain_file(path: Path, depth: int) -> Path:
    """A genuine session file whose head is one summary covering a summary … ``depth`` deep
    (what ``depth`` rolling ``fold(0, 2)`` calls leave), written directly: building it through
    the API takes a minute."""
    lines: list[dict[str, Any]] = [{"format": "alpstore.session", "version": 1}]

    def blob(value: Any, kind: str) -> bytes:
        raw = canonical_json(value)
        digest = blake3.blake3(raw).digest()
        lines.append({"type": "blob", "digest": digest.hex(), "kind": kind, "value": value})
        return digest

    top = blob({"role": "user", "content": "start"}, "message")
    for i in range(depth):
        msg = blob({"role": "user", "content": f"m{i}"}, "message")
        top = blob(summary_document(f"fold {i}", [top, msg]), "summary")
    digester = Digester()
    state = digester.apply(0, [top.hex()], commit=True)
    body: list[dict[str, Any]] = [
        {
            "type": "session",
            "uuid": "deep-chain",
            "name": "deep",
            "status": "active",
            "turn": depth + 1,
            "backtrack_count": 0,
            "retention": {"mode": "all", "n": 1},
            "origin": None,
            "manifest": None,
            "created_at": 1.0,
            "updated_at": 2.0,
            "parent": None,
        },
        {
            "type": "checkpoint",
            "id": 1,
            "seq": 1,
            "turn": depth + 1,
            "label": None,
            "trigger": None,
            "abandoned": False,
            "created_at": 2.0,
            "kernel": None,
            "wm": None,
            "keep": 0,
            "add": [top.hex()],
            "covering": state.covering,
        },
        {"type": "head", "keep": 1, "add": [], "covering": state.covering},
    ]
    seal = Digester()
    for rec in body:
        seal.feed(rec)
    lines.extend(body)
    lines.append({"type": "end", "lines": len(lines) + 1, "digest": seal.hexdigest()})
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in lines))
    return path


@pytest.mark.slow
def test_a_10000_deep_fold_chain_exports_and_imports(backend: Backend, tmp_path: Path) -> None:
    bundle = _chain_file(tmp_path / "chain.session.jsonl", 10_000)
    r = backend.cli("session", "import", str(bundle))
    assert r.code == 0, r.err
    again = tmp_path / "again.session.jsonl.zst"
    r = backend.cli("session", "export", "deep", "-o", str(again))
    assert r.code == 0, r.err
    ck = tmp_path / "deep.json.zst"
    r = backend.cli("checkpoint", "export", "deep", "-o", str(ck))
    assert r.code == 0, r.err  # exit 70 (RecursionError) before
    digest = backend.cli("session", "digest", "deep").out
    other = tmp_path / "other"
    other.mkdir()
    r = run_cli("--root", str(other), "session", "import", str(again))
    assert r.code == 0, r.err
    assert run_cli("--root", str(other), "session", "digest", "deep").out == digest
    third = tmp_path / "third"
    third.mkdir()
    r = run_cli("--root", str(third), "checkpoint", "import", str(ck))
    assert r.code == 0, r.err
    with Store.open(third) as store:
        (entry,) = store.get_session("deep").history()
        assert entry.kind == "summary" and entry.value["summary"] == "fold 9999"
