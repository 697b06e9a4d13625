"""`alpstore ui` page times on a 10,000-turn session (40,000 messages, a checkpoint every turn),
measured server-side in process (Starlette's test client: routing, queries, Jinja2 rendering;
no network, no browser), each beside the unwindowed library call it replaces, run in the same
process.

Run: python -m pytest benchmarks/bench_ui.py --benchmark-only -s
Writes benchmarks/results/ui.md (benchmarks/report.py puts it into RESULTS.md).

- timeline: the last page (100 checkpoints, bytes added, markers, chart) and the first page,
  against `session log`'s per-checkpoint deltas over every checkpoint;
- conversation: the last window (200 of 40,000 entries, new ones marked) and the first, against
  hydrating the whole head;
- diff of the first and the last checkpoint (first page of 40,000 added entries), against
  `debug diff` of the same pair.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from alpstore.debug.diff import diff
from alpstore.store import Store, checkpoint_deltas
from alpstore.ui.app import Settings, create_app
from alpstore.ui.readonly import open_read_only

TURNS = 10_000
BUDGET_MS = 200.0
RESULTS: dict[str, tuple[float, str, float]] = {}
OUT = Path(__file__).parent / "results" / "ui.md"


def _turn(t: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"Please fix test {t} in src/mod_{t % 97}.py"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{t}",
                    "type": "function",
                    "function": {"name": "bash", "arguments": f'{{"command": "pytest -q t{t}"}}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"call_{t}", "content": f"{t % 7} failed, {t} passed"},
        {"role": "assistant", "content": f"Done {t}: patched mod_{t % 97} <and> escaped"},
    ]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Store, str]]:
    from starlette.testclient import TestClient

    root = tmp_path_factory.mktemp("bench-ui")
    with Store.open(root) as st:
        s = st.create_session(name="long")
        for t in range(1, TURNS + 1):
            s.commit_turn(_turn(t))
        uuid = s.uuid
    ro = open_read_only(root)
    app = create_app(Settings(ro, "t", 1, ["testserver"]))
    with TestClient(app) as client:
        assert client.get("/?token=t").status_code == 200
        yield client, ro, uuid
    ro.close()


def _page(client: Any, path: str) -> Callable[[], None]:
    def get() -> None:
        r = client.get(path)
        assert r.status_code == 200, r.text[:300]

    return get


def _once(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


@pytest.mark.parametrize(
    "name",
    [
        "timeline, last page",
        "timeline, first page",
        "conversation, last window",
        "conversation, first window",
        "diff first → last, first page",
    ],
)
def test_ui_page(benchmark: Any, served: tuple[Any, Store, str], name: str) -> None:
    client, st, uuid = served
    first = st.resolve_checkpoint(f"{uuid}@1")
    last = st.resolve_checkpoint(f"{uuid}@latest")
    paths = {
        "timeline, last page": f"/s/{uuid}",
        "timeline, first page": f"/s/{uuid}?page=0",
        "conversation, last window": f"/c/{last.id}",
        "conversation, first window": f"/c/{last.id}?start=0",
        "diff first → last, first page": f"/diff?a={first.id}&b={last.id}",
    }
    baselines: dict[str, tuple[str, Callable[[], Any]]] = {
        "timeline": (
            "`session log` deltas of all 10,000 checkpoints",
            lambda: checkpoint_deltas(st, st.list_checkpoints(last_session_id(st, uuid))),
        ),
        "conversation": ("hydrate the whole 40,000-entry head", lambda: st.hydrate(last)),
        "diff": ("`debug diff` of the same pair", lambda: diff(st, str(first.id), str(last.id))),
    }
    benchmark.pedantic(_page(client, paths[name]), rounds=7, iterations=1, warmup_rounds=1)
    ms = benchmark.stats.stats.median * 1000
    what, base = baselines[name.split(",")[0].split(" ")[0]]
    base_ms = min(_once(base) for _ in range(2))
    benchmark.extra_info.update(
        median_ms=round(ms, 1), baseline=what, baseline_ms=round(base_ms, 1)
    )
    RESULTS[name] = (ms, what, base_ms)
    _write()


def last_session_id(st: Store, uuid: str) -> int:
    return st.get_session(uuid).id


def _write() -> None:
    lines = [
        "# alpstore ui: page times on a 10,000-turn session (issue 18)",
        "",
        f"One session of {TURNS:,} turns (4 messages each: 40,000 entries, a checkpoint every "
        "turn) on SQLite. Server-side time of one page (Starlette test client in process: "
        "routing, queries, Jinja2 rendering), median of 7; the baseline is the unwindowed "
        "library call the page replaces, best of 2, same process. Budget: "
        f"{BUDGET_MS:.0f} ms a page.",
        "",
        "| page | median (ms) | within budget | baseline | baseline (ms) | page ÷ baseline |",
        "|---|---:|:---:|---|---:|---:|",
    ]
    for name, (ms, what, base_ms) in RESULTS.items():
        ok = "yes" if ms < BUDGET_MS else "**no**"
        lines.append(f"| {name} | {ms:.1f} | {ok} | {what} | {base_ms:.1f} | {ms / base_ms:.3f} |")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
