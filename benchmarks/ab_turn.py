"""A/B of the per-turn cost (`commit_turn`, 4 messages, every-turn checkpoint) between two
checkouts of alpstore, measured in the same run: each round starts one process per checkout,
each on a fresh archive built to the same history length, and has them commit their turns in
lockstep (old, new, new, old, …), so that both see the same machine at the same moments.

    python benchmarks/ab_turn.py --old /work/main --new . [--rounds 6] [--turns 1000]

Prints each round's median per-turn time for both trees and the median of the per-round
ratios (new ÷ old). Issue 13 uses it to show that ids never reused and covering digests cost
the hot path under 5 %.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import sys, tempfile, time
sys.path.insert(0, {bench!r})
from alpstore.store import Store
import alpstore
from _util import four_message_turns
with tempfile.TemporaryDirectory() as tmp:
    store = Store.open(tmp)
    session = store.create_session(name="bench")
    work = four_message_turns(10_000_000)
    for _ in range({turns} + 5):
        session.commit_turn(next(work))
    print("ready", alpstore.__file__, flush=True)
    for line in sys.stdin:
        turn = next(work)
        start = time.perf_counter()
        session.commit_turn(turn)
        print(time.perf_counter() - start, flush=True)
    store.close()
"""


def start(tree: Path, turns: int) -> subprocess.Popen[str]:
    """A child on ``tree``'s alpstore with a session of ``turns`` turns, waiting for orders."""
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    env.pop("ALPSTORE_DATABASE_URL", None)
    code = CHILD.format(bench=str(Path(__file__).parent), turns=turns)
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        cwd=tempfile.gettempdir(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    ready = child.stdout.readline().split()
    if not ready or ready[0] != "ready" or not ready[1].startswith(str(tree.resolve())):
        raise SystemExit(f"{tree}: the child did not start on this tree ({ready})")
    return child


def turn(child: subprocess.Popen[str]) -> float:
    """Order one turn; its seconds."""
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write("\n")
    child.stdin.flush()
    return float(child.stdout.readline())


def measure_round(old: Path, new: Path, turns: int, timed: int) -> tuple[float, float]:
    """Median per-turn seconds of both trees, their turns interleaved one by one (alternating
    which goes first), so both see the same machine at the same moments."""
    children = {"old": start(old, turns), "new": start(new, turns)}
    times: dict[str, list[float]] = {"old": [], "new": []}
    try:
        for i in range(timed):
            for name in ("old", "new") if i % 2 else ("new", "old"):
                times[name].append(turn(children[name]))
    finally:
        for child in children.values():
            assert child.stdin is not None
            child.stdin.close()
            child.wait(timeout=60)
    return statistics.median(times["old"]), statistics.median(times["new"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--old", type=Path, required=True, help="checkout of the baseline")
    parser.add_argument("--new", type=Path, default=Path("."), help="checkout under test")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--turns", type=int, default=1000, help="history length before timing")
    parser.add_argument("--timed", type=int, default=300, help="turns timed per measurement")
    args = parser.parse_args()
    ratios = []
    for r in range(args.rounds):
        old, new = measure_round(args.old, args.new, args.turns, args.timed)
        got = {"old": old, "new": new}
        ratios.append(new / old)
        print(
            f"round {r + 1}: old {got['old'] * 1000:.3f} ms/turn, new {got['new'] * 1000:.3f} "
            f"ms/turn, ratio {ratios[-1]:.3f}",
            flush=True,
        )
    print(f"median ratio new/old over {args.rounds} rounds: {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
