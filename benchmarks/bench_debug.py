"""Reverse debugging at scale, measured side by side in one run.

Run: python -m pytest benchmarks/bench_debug.py --benchmark-only -s

- bisect over a 10,000-turn session (every turn checkpointed, a bad turn planted): hydrations
  (against the ⌈log2 n⌉ + 1 bound) and time, next to the time of one hydration of the full head
  (the baseline unit: bisect should cost about "hydrations x one hydration", never n of them);
- ``debug diff`` of two 10,000-entry heads against a plain Python list comparison of the same
  data (already in memory): a fork sharing half its history, and two unrelated sessions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from difflib import SequenceMatcher
from typing import Any

import pytest

from alpstore.debug.bisect import bisect, grep_predicate
from alpstore.debug.diff import diff
from alpstore.store import Store
from benchmarks._util import best_of

TURNS = 10_000
BAD_TURN = 7_321
ENTRIES = 10_000


def _turn(t: int, tag: str = "") -> list[dict[str, Any]]:
    reply = "rm -rf build/" if t == BAD_TURN and not tag else f"Done {tag}{t}: patched mod_{t % 97}"
    return [
        {"role": "user", "content": f"Please fix test {tag}{t} in src/mod_{t % 97}.py"},
        {"role": "assistant", "content": reply},
    ]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    st = Store.open(tmp_path_factory.mktemp("bench-debug"))
    long = st.create_session(name="long")
    for t in range(1, TURNS + 1):
        long.commit_turn(_turn(t))
    half = ENTRIES // 4  # turns of two messages: half of the entries
    a = st.create_session(name="a")
    a.append([m for t in range(1, half + 1) for m in _turn(t, "a")])
    fork_point = a.checkpoint()
    a.append([m for t in range(half + 1, 2 * half + 1) for m in _turn(t, "a")])
    a.checkpoint(label="a-head")
    child = st.fork_checkpoint(fork_point, name="b")
    child.append([m for t in range(1, half + 1) for m in _turn(t, "b")])
    child.checkpoint(label="b-head")
    c = st.create_session(name="c")
    c.append([m for t in range(1, ENTRIES // 2 + 1) for m in _turn(t, "c")])
    c.checkpoint(label="c-head")
    yield st
    st.close()


def test_bisect_10k_turns(benchmark: Any, store: Store) -> None:
    s = store.get_session("long")
    latest = store.resolve_checkpoint("long@latest")
    one = best_of(lambda: store.hydrate(latest))
    result: list[Any] = []
    benchmark.pedantic(
        lambda: result.append(bisect(store, s, grep_predicate("rm -rf"))), rounds=3, iterations=1
    )
    r = result[-1]
    assert r.first_bad.turn == BAD_TURN
    bound = math.ceil(math.log2(TURNS)) + 1
    assert r.hydrations <= bound
    took = benchmark.stats.stats.min
    benchmark.extra_info.update(
        {
            "checkpoints": TURNS,
            "hydrations": r.hydrations,
            "bound": bound,
            "one full hydration s": round(one, 4),
            "bisect / one hydration": round(took / one, 2),
        }
    )
    print(
        f"\nbisect over {TURNS} checkpoints: turn {r.first_bad.turn} in {r.hydrations} hydrations "
        f"(bound {bound}), {took:.3f} s; one full hydration {one:.3f} s "
        f"(= {took / one:.1f} full hydrations)"
    )


def _plain_diff(a: list[Any], b: list[Any]) -> tuple[int, int, int]:
    """The same comparison on Python lists already in memory: prefix, then an ordered diff."""
    common = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        common += 1
    keys_a = [json.dumps(m, sort_keys=True) for m in a[common:]]
    keys_b = [json.dumps(m, sort_keys=True) for m in b[common:]]
    removed = added = 0
    for op, i1, i2, j1, j2 in SequenceMatcher(None, keys_a, keys_b, autojunk=False).get_opcodes():
        if op != "equal":
            removed += i2 - i1
            added += j2 - j1
    return common, removed, added


@pytest.mark.parametrize(
    ("a_ref", "b_ref"),
    [("a@latest", "b@latest"), ("a@latest", "c@latest")],
    ids=["fork-sharing-half", "unrelated"],
)
def test_diff_two_10k_heads(benchmark: Any, store: Store, a_ref: str, b_ref: str) -> None:
    a, b = store.resolve_checkpoint(a_ref), store.resolve_checkpoint(b_ref)
    assert a.length == b.length == ENTRIES
    list_a = [e.value for e in store.hydrate(a)]
    list_b = [e.value for e in store.hydrate(b)]
    expected = _plain_diff(list_a, list_b)
    base = best_of(lambda: _plain_diff(list_a, list_b))
    result: list[Any] = []
    benchmark.pedantic(lambda: result.append(diff(store, a_ref, b_ref)), rounds=3, iterations=1)
    r = result[-1]
    assert (r.common, len(r.removed), len(r.added)) == expected
    took = benchmark.stats.stats.min
    benchmark.extra_info.update(
        {
            "entries": ENTRIES,
            "common": r.common,
            "plain list s": round(base, 4),
            "ratio (debug diff / plain list)": round(took / base, 2),
        }
    )
    print(
        f"\ndebug diff {a_ref} {b_ref}: {took:.3f} s; plain list comparison {base:.3f} s "
        f"(ratio {took / base:.2f}x; common prefix {r.common}, -{len(r.removed)} +{len(r.added)})"
    )
