"""A/B of the per-turn cost (`commit_turn`, 4 messages, every-turn checkpoint) between two
checkouts of alpstore, measured in the same run: each round times both, alternating which goes
first, each in a fresh subprocess on a fresh archive built to the same history length.

    python benchmarks/ab_turn.py --old /work/main --new . [--rounds 6] [--turns 1000]

Prints each round's median per-turn time for both trees and the median of the per-round
ratios (new ÷ old). Issue 13 uses it to show that ids never reused and covering digests cost
the hot path under 5 %.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

MEASURE = r"""
import json, sys, tempfile, time
sys.path.insert(0, {bench!r})
from alpstore.store import Store
from _util import four_message_turns
turns, timed = {turns}, {timed}
with tempfile.TemporaryDirectory() as tmp:
    store = Store.open(tmp)
    session = store.create_session(name="bench")
    work = four_message_turns(turns + timed + 10)
    for _ in range(turns):
        session.commit_turn(next(work))
    for _ in range(5):
        session.commit_turn(next(work))
    times = []
    for _ in range(timed):
        turn = next(work)
        start = time.perf_counter()
        session.commit_turn(turn)
        times.append(time.perf_counter() - start)
    store.close()
import alpstore
print(json.dumps({{"median": sorted(times)[len(times) // 2], "from": alpstore.__file__}}))
"""


def measure(tree: Path, turns: int, timed: int) -> float:
    """The median per-turn seconds of ``tree``'s alpstore, in a subprocess of its own."""
    code = MEASURE.format(bench=str(Path(__file__).parent), turns=turns, timed=timed)
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    env.pop("ALPSTORE_DATABASE_URL", None)
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True
        )
    if out.returncode != 0:
        raise SystemExit(f"{tree}: {out.stderr.strip().splitlines()[-1]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if not str(result["from"]).startswith(str(tree.resolve())):
        raise SystemExit(f"{tree}: measured {result['from']} instead")
    return float(result["median"])


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
        order = [("old", args.old), ("new", args.new)]
        if r % 2:
            order.reverse()
        got = {name: measure(tree, args.turns, args.timed) for name, tree in order}
        ratios.append(got["new"] / got["old"])
        print(
            f"round {r + 1}: old {got['old'] * 1000:.3f} ms/turn, new {got['new'] * 1000:.3f} "
            f"ms/turn, ratio {ratios[-1]:.3f}",
            flush=True,
        )
    print(f"median ratio new/old over {args.rounds} rounds: {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
