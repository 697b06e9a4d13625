"""The inspector and `session list` beside 30,000 sessions and 5,000 backtracks (issue 30 item
7): each page measured server-side in process (Starlette's test client: routing, queries,
Jinja2 rendering), `session list` in process (the read-only lite store the command opens) and
as the real command, each beside a plain sqlite3 read of the same rows in the same process.

Run: python -m pytest benchmarks/bench_scale.py --benchmark-only -s
Writes benchmarks/results/scale.md (benchmarks/report.py puts it into RESULTS.md).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from alpstore.db import raw as rsql
from alpstore.db.opening import sqlite_path_for_root
from alpstore.store import Store
from alpstore.ui.app import Settings, create_app
from alpstore.ui.readonly import open_read_only

SESSIONS = 30_000
BACKTRACKS = 5_000
TURNS = 300
PAGE_BUDGET_MS = 300.0
POLL_BUDGET_MS = 50.0
RESULTS: dict[str, tuple[float, float, float]] = {}
OUT = Path(__file__).parent / "results" / "scale.md"
ALPSTORE = str(Path(sys.executable).with_name("alpstore"))


def _build(root: Path) -> str:
    """One 300-turn session with 5,000 backtracks, and 30,000 sessions in all."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.ui._deep_chain import many_sessions

    with Store.open(root) as st:
        s = st.create_session(name="busy")
        for t in range(1, TURNS + 1):
            s.commit_turn(
                [
                    {"role": "user", "content": f"fix test {t}"},
                    {"role": "assistant", "content": f"patched {t}"},
                ]
            )
        cks = [(c.id, c.created_at) for c in s.checkpoints()]
        with st.db.atomic() as conn:
            rows = [
                (
                    s.id,
                    cks[k % len(cks)][0],
                    cks[k % len(cks)][0],
                    1,
                    False,
                    None,
                    cks[k % len(cks)][1] + 1e-6 * (k // len(cks) + 1),
                )
                for k in range(BACKTRACKS)
            ]
            rsql.executemany(
                conn,
                "INSERT INTO backtracks (session_id, from_checkpoint_id, to_checkpoint_id, "
                "steps, automatic, error_signature, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
        many_sessions(st, s, SESSIONS - 1)
        return s.uuid


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Store, str, Path]]:
    from starlette.testclient import TestClient

    root = tmp_path_factory.mktemp("bench-scale")
    uuid = _build(root)
    ro = open_read_only(root)
    app = create_app(Settings(ro, "t", 1, ["testserver"]))
    with TestClient(app) as client:
        assert client.get("/?token=t").status_code == 200
        yield client, ro, uuid, root
    ro.close()


def _baseline(root: Path, sql: str) -> float:
    """Best of 3: a plain sqlite3 read of the rows (ms)."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        con = sqlite3.connect(f"file:{sqlite_path_for_root(root)}?mode=ro", uri=True)
        con.execute(sql).fetchall()
        con.close()
        best = min(best, (time.perf_counter() - t0) * 1000)
    return best


PAGES = {
    "Sessions page (first of 150)": ("/", "SELECT * FROM sessions ORDER BY id"),
    "Sessions page (last)": ("/?page=149", "SELECT * FROM sessions ORDER BY id"),
    "Sessions search (`bulk`)": ("/?q=bulk", "SELECT * FROM sessions ORDER BY id"),
    "timeline, last page": ("/s/{uuid}", "SELECT * FROM backtracks ORDER BY id"),
    "timeline, first page": ("/s/{uuid}?page=0", "SELECT * FROM backtracks ORDER BY id"),
    "conversation, last checkpoint": ("/c/{last}", "SELECT * FROM sessions ORDER BY id"),
    "diff first → last": ("/diff?a={first}&b={last}", "SELECT * FROM sessions ORDER BY id"),
    "live poll (one new checkpoint)": (
        "/s/{uuid}/poll?after={before}",
        "SELECT * FROM backtracks ORDER BY id",
    ),
}


@pytest.mark.parametrize("name", list(PAGES))
def test_scale_page(benchmark: Any, served: Any, name: str) -> None:
    client, st, uuid, root = served
    first = st.resolve_checkpoint(f"{uuid}@1")
    last = st.resolve_checkpoint(f"{uuid}@latest")
    path, base_sql = PAGES[name]
    path = path.format(uuid=uuid, first=first.id, last=last.id, before=last.seq - 1)

    def get() -> None:
        r = client.get(path)
        assert r.status_code == 200, r.text[:300]

    benchmark.pedantic(get, rounds=7, iterations=1, warmup_rounds=1)
    ms = benchmark.stats.stats.median * 1000
    base = _baseline(root, base_sql)
    budget = POLL_BUDGET_MS if "poll" in name else PAGE_BUDGET_MS
    RESULTS[name] = (ms, base, budget)
    benchmark.extra_info.update(median_ms=round(ms, 1), baseline_ms=round(base, 1))
    _write()
    assert ms <= budget, f"{name}: {ms:.0f} ms (budget {budget:.0f} ms)"


@pytest.mark.parametrize(
    "name",
    [
        "session list, first 100, in process",
        "session list, all 30,000, in process",
        "`alpstore session list` (all rows)",
        "`alpstore session list --limit 100`",
    ],
)
def test_session_list(benchmark: Any, served: Any, name: str) -> None:
    """`session list`: the read-only store the command opens (sqlite3 driver only) listing all
    30,000 sessions, and the real command (a subprocess: its start-up included) to a pipe."""
    _, _, _, root = served
    if name.endswith("in process"):
        limit = 100 if "first 100" in name else None

        def run() -> None:
            with Store.open(root, read_only=True) as st:
                assert len(st.list_sessions(limit=limit)) == (limit or SESSIONS)

    else:
        args = [ALPSTORE, "--root", str(root), "session", "list"]
        if "--limit" in name:
            args += ["--limit", "100"]

        def run() -> None:
            subprocess.run(args, check=True, capture_output=True)

    benchmark.pedantic(run, rounds=5, iterations=1, warmup_rounds=1)
    ms = benchmark.stats.stats.median * 1000
    base = _baseline(root, "SELECT * FROM sessions ORDER BY id")
    RESULTS[name] = (ms, base, PAGE_BUDGET_MS)
    benchmark.extra_info.update(median_ms=round(ms, 1), baseline_ms=round(base, 1))
    _write()
    if "first 100" in name:  # the budget; the others are reported beside their baseline
        assert ms <= PAGE_BUDGET_MS, f"{name}: {ms:.0f} ms"


def _write() -> None:
    lines = [
        "# Scale: the inspector and `session list` beside 30,000 sessions (issue 30)",
        "",
        f"{SESSIONS:,} sessions, one of {TURNS} turns with {BACKTRACKS:,} backtracks, on SQLite. "
        "Median of 7 (server-side, Starlette test client in process); the baseline is a plain "
        "sqlite3 read of the whole table the page draws from (best of 3, same process).",
        "",
        "| what | median | baseline | ratio | budget |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, (ms, base, budget) in RESULTS.items():
        lines.append(
            f"| {name} | {ms:.1f} ms | {base:.1f} ms | {ms / base:.2f}× | {budget:.0f} ms |"
        )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
