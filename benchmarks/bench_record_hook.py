"""The recording hook's cost per turn, early and at 1,000 turns (issue 43; goal ≤ 200 ms
median whole-process time per turn at 1,000 turns, not growing with the transcript).

Run: ``python benchmarks/bench_record_hook.py [--turns 1000] [--sample 15]``. Writes
``benchmarks/results/record_hook.md``.

A real-shaped Claude Code transcript (each turn: a prompt, a response written as three records
sharing ``message.id`` — thinking, text, a ``tool_use`` — its ``tool_result`` of ~1.5 KB, the
final answer, a ``stop_hook_summary`` system record) grows turn by turn; after each turn the
hook runs as Claude Code runs it: a fresh process, the Stop payload on stdin. Measured, per
turn, from spawn to exit:

- **hook (as installed)**: ``python -c 'from alpstore.cli.record_hook import main; main()'
  --root R`` — what the agent
  waits for (the size check, then a fork: the import goes on in a detached child);
- **turn recorded**: from the same spawn until that child committed the turn (the end state;
  DESIGN invariant 11);
- **hook --foreground**: the import in the hook's own process (spawn to exit);
- baselines in the same run: ``python -c pass`` and the hook on an unchanged transcript (it
  opens nothing).

``--sample`` turns are measured at the start (turns 1…) and again after the transcript was
grown to ``--turns`` turns (the turns between imported by one ``session import``): the ratio
late ÷ early says whether a turn's cost grows with the transcript (it reads only new bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make ``benchmarks`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._util import write_results
from tests.fixtures.transcripts.build import Claude, real_turn

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "record_hook.md"
GOAL_MS = 200
REPO = HERE.parent


def add_turn(cc: Claude, i: int) -> None:
    """One real-shaped turn (the fixtures' ``real_turn``)."""
    real_turn(cc, i)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ALPSTORE_DATABASE_URL"}
    env["PYTHONPATH"] = str(REPO)
    return env


def _run(args: list[str], payload: bytes) -> float:
    start = time.perf_counter()
    subprocess.run(args, input=payload, env=_env(), check=True, capture_output=True)
    return time.perf_counter() - start


KEYS = ("hook", "recorded", "fg", "noop", "pass")


class Transcript:
    """One transcript the hook records, and where its turns stand."""

    def __init__(self, tmp: Path, seed: str) -> None:
        self.cc = Claude(seed=seed)
        self.path = tmp / seed / f"{self.cc.session}.jsonl"
        self.turn = 0
        self.times: dict[str, list[float]] = {k: [] for k in KEYS}

    def grow(self) -> None:
        self.turn += 1
        add_turn(self.cc, self.turn)
        self.cc.write(self.path)

    def payload(self) -> bytes:
        return json.dumps(
            {
                "session_id": self.cc.session,
                "transcript_path": str(self.path),
                "cwd": str(self.path.parent),
                "hook_event_name": "Stop",
            }
        ).encode()


def one_turn(t: Transcript, root: Path) -> None:
    """A turn through the installed hook (and until it landed), a turn through the hook in
    the foreground, the hook with nothing new, and ``python -c pass``.
    """
    code = "from alpstore.cli.record_hook import main; main()"  # as `hook install` writes it
    hook = [sys.executable, "-c", code, "--root", str(root)]
    t.grow()
    size = str(t.path.stat().st_size)
    seen = _seen(root, t.path)
    start = time.perf_counter()
    subprocess.run(hook, input=t.payload(), env=_env(), check=True, capture_output=True)
    t.times["hook"].append(time.perf_counter() - start)
    while True:  # the detached child writes the transcript's size when it committed
        try:
            if seen.read_text() == size:
                break
        except OSError:
            pass
        time.sleep(0.002)
    t.times["recorded"].append(time.perf_counter() - start)
    t.times["noop"].append(_run(hook, t.payload()))
    t.grow()
    t.times["fg"].append(_run([*hook, "--foreground"], t.payload()))
    t.times["pass"].append(_run([sys.executable, "-c", "pass"], b""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--sample", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "run"
        root.mkdir()
        small, large = Transcript(Path(tmp), "small"), Transcript(Path(tmp), "large")
        for _ in range(args.turns):
            add_turn(large.cc, large.turn + 1)
            large.turn += 1
        large.cc.write(large.path)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "alpstore.cli.main",
                "--root",
                str(root),
                "session",
                "import",
                str(large.path),
            ],
            env=_env(),
            check=True,
            capture_output=True,
        )
        for _ in range(args.sample):  # interleaved: both see the same machine load
            one_turn(small, root)
            one_turn(large, root)
        size = large.path.stat().st_size
    report(small, large, size, args)


def _seen(root: Path, path: Path) -> Path:
    from alpstore.cli.record_hook import seen_file

    return Path(seen_file(str(root), str(path)))


def _ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def report(small: Transcript, large: Transcript, size: int, args: Any) -> None:
    rows = [
        ("hook, as installed (what the agent waits)", "hook"),
        ("turn recorded (the detached import committed)", "recorded"),
        ("hook --foreground (import in the hook's process)", "fg"),
        ("baseline: the hook, transcript unchanged", "noop"),
        ("baseline: python -c pass", "pass"),
    ]
    e_pass, l_pass = _ms(small.times["pass"]), _ms(large.times["pass"])
    lines = [
        "# The recording hook per turn (issue 43)",
        "",
        f"Medians of {args.sample} turns of each transcript, interleaved (the same machine "
        f"load), spawn to exit (ms). Small: turns 1…{small.turn}; large: turns "
        f"{args.turns + 1}…{large.turn} of a transcript of {large.turn} turns "
        f"({size / 1e6:.1f} MB). Goal: ≤ {GOAL_MS} ms at 1,000 turns, not growing.",
        "",
        "| per turn | small | at 1,000 turns | large ÷ small | ÷ python -c pass (small, large) |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label, key in rows:
        e, l_ = _ms(small.times[key]), _ms(large.times[key])
        lines.append(
            f"| {label} | {e:.0f} | {l_:.0f} | {l_ / e:.2f} | {e / e_pass:.1f}, {l_ / l_pass:.1f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    write_results(RESULTS, text)


if __name__ == "__main__":
    main()
