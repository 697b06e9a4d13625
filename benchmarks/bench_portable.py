"""Deep export and import of a 10,000-message session, against bare json in the same run.

Run: python -m pytest benchmarks/bench_portable.py --benchmark-only
Each test records MB/s and its ratio to the baseline (goal >= 50 %) in extra_info, and prints
them; file sizes with and without .zst are recorded too.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from alpstore.portable.deep import export_snapshot, import_document, snapshot_of_head
from alpstore.portable.files import encode_document, load_checkpoint_file, write_checkpoint_file
from alpstore.store import Store

MESSAGES = 10_000


def _messages() -> list[dict[str, Any]]:
    out = []
    for i in range(MESSAGES):
        if i % 2 == 0:
            out.append(
                {
                    "role": "user",
                    "content": f"Please look at file src/mod_{i % 97}.py and "
                    f"fix the failing test number {i}; keep the style consistent.",
                }
            )
        else:
            out.append(
                {
                    "role": "assistant",
                    "content": f"I read src/mod_{i % 97}.py. The test "
                    f"{i - 1} fails because the fixture is stale. " + "Patch: ... " * 8,
                    "tool_calls": [
                        {
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {"name": "edit", "arguments": "{}"},
                        }
                    ],
                }
            )
    return out


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, Any]]:
    root = tmp_path_factory.mktemp("bench-src")
    st = Store.open(root)
    s = st.create_session(
        session_id="bench", manifest={"kind": "Agent", "metadata": {"name": "b"}, "spec": {}}
    )
    s.append(_messages())
    s.fold(0, 1000, "summary of the first thousand messages")
    s.checkpoint(kernel={"q": {}, "run": {}})
    yield st, s
    st.close()


def _best(fn: Callable[[], Any], rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _report(benchmark: Any, name: str, nbytes: int, baseline_s: float) -> None:
    mean = benchmark.stats.stats.min
    mbps = nbytes / mean / 1e6
    base_mbps = nbytes / baseline_s / 1e6
    benchmark.extra_info.update(
        {
            "bytes": nbytes,
            "MB/s": round(mbps, 1),
            "baseline MB/s": round(base_mbps, 1),
            "ratio": round(mbps / base_mbps, 3),
        }
    )
    print(
        f"\n{name}: {mbps:.1f} MB/s, baseline {base_mbps:.1f} MB/s, "
        f"ratio {mbps / base_mbps:.0%} ({nbytes / 1e6:.2f} MB)"
    )


def test_deep_export_10k(benchmark: Any, source: tuple[Store, Any], tmp_path: Path) -> None:
    st, s = source
    out = tmp_path / "bench-turn.json"
    doc = export_snapshot(st, snapshot_of_head(st, s))
    base_path = tmp_path / "baseline.json"

    def baseline() -> None:
        base_path.write_bytes(json.dumps(doc, ensure_ascii=False).encode("utf-8"))

    base = _best(baseline)

    def run() -> None:
        write_checkpoint_file(export_snapshot(st, snapshot_of_head(st, s), scan=False), out)

    benchmark.pedantic(run, rounds=3, iterations=1)
    size = out.stat().st_size
    zst = len(encode_document(doc, compress=True))
    benchmark.extra_info.update(
        {"json bytes": size, "json.zst bytes": zst, "zst ratio": round(size / zst, 2)}
    )
    print(
        f"\nfile size: {size / 1e6:.2f} MB .json, {zst / 1e6:.2f} MB .json.zst ({size / zst:.1f}x)"
    )
    _report(benchmark, "deep export", size, base)


def test_deep_import_10k(
    benchmark: Any, source: tuple[Store, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    st, s = source
    doc = export_snapshot(st, snapshot_of_head(st, s))
    path = tmp_path_factory.mktemp("imp") / "bench.json"
    write_checkpoint_file(doc, path)
    size = path.stat().st_size
    base = _best(lambda: json.loads(path.read_bytes()))
    counter = itertools.count()

    def setup() -> tuple[tuple[Store], dict[str, Any]]:
        return (Store.open(tmp_path_factory.mktemp(f"dst{next(counter)}")),), {}

    def run(dst: Store) -> None:
        import_document(dst, load_checkpoint_file(path), source_name=path.name)
        dst.close()

    benchmark.pedantic(run, setup=setup, rounds=3, iterations=1)
    _report(benchmark, "deep import", size, base)
