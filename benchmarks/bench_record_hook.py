"""The recording hook's cost per turn, early and at 1,000 turns (issue 43; goal ≤ 200 ms
median whole-process time per turn at 1,000 turns, not growing with the transcript).

Run: ``python benchmarks/bench_record_hook.py [--turns 1000] [--sample 15]``. Writes
``benchmarks/results/record_hook.md``.

A real-shaped Claude Code transcript (each turn: a prompt, a response written as three records
sharing ``message.id`` — thinking, text, a ``tool_use`` — its ``tool_result`` of ~1.5 KB, the
final answer, a ``stop_hook_summary`` system record) grows turn by turn; after each turn the
hook runs as Claude Code runs it: a fresh process, the Stop payload on stdin. Measured, per
turn, from spawn to exit:

- **hook (as installed)**: ``python -m alpstore.cli.record_hook --root R`` — what the agent
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


def _seen(root: Path) -> Path:
    (path,) = (root / "traces" / "hooks").glob("*.seen")
    return path


def measure(cc: Claude, path: Path, root: Path, first: int, n: int) -> dict[str, list[float]]:
    """Run ``n`` turns from turn ``first`` through the hook, each way, and the baselines."""
    hook = [sys.executable, "-m", "alpstore.cli.record_hook", "--root", str(root)]
    times: dict[str, list[float]] = {k: [] for k in ("hook", "recorded", "fg", "pass", "noop")}
    payload = json.dumps(
        {
            "session_id": cc.session,
            "transcript_path": str(path),
            "cwd": "/",
            "hook_event_name": "Stop",
        }
    ).encode()
    for i in range(first, first + n):
        add_turn(cc, i)
        cc.write(path)
        size = str(path.stat().st_size)
        start = time.perf_counter()
        subprocess.run(hook, input=payload, env=_env(), check=True, capture_output=True)
        times["hook"].append(time.perf_counter() - start)
        while True:  # the detached child writes the transcript's size when it committed
            try:
                if _seen(root).read_text() == size:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.002)
        times["recorded"].append(time.perf_counter() - start)
        times["noop"].append(_run(hook, payload))
        add_turn(cc, 10**6 + i)  # a second turn, imported in the hook's own process
        cc.write(path)
        times["fg"].append(_run([*hook, "--foreground"], payload))
        times["pass"].append(_run([sys.executable, "-c", "pass"], b""))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--sample", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "run"
        root.mkdir()
        cc = Claude(seed="bench")
        path = Path(tmp) / "project" / f"{cc.session}.jsonl"
        early = measure(cc, path, root, 1, args.sample)
        early_turns = len([r for r in cc.records if r.get("type") == "user"]) // 2
        for i in range(args.sample + 1, args.turns - args.sample + 1):
            add_turn(cc, i)
        cc.write(path)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "alpstore.cli.main",
                "--root",
                str(root),
                "session",
                "import",
                str(path),
            ],
            env=_env(),
            check=True,
            capture_output=True,
        )
        late_first = args.turns - args.sample + 1
        late = measure(cc, path, root, late_first, args.sample)
        size = path.stat().st_size
        turns = sum(
            1
            for r in cc.records
            if r.get("type") == "user" and isinstance(r["message"]["content"], str)
        )
    report(early, late, early_turns, turns, size, args)


def _ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def report(
    early: dict[str, list[float]],
    late: dict[str, list[float]],
    early_turns: int,
    turns: int,
    size: int,
    args: Any,
) -> None:
    rows = [
        ("hook, as installed (what the agent waits)", "hook"),
        ("turn recorded (the detached import committed)", "recorded"),
        ("hook --foreground (import in the hook's process)", "fg"),
        ("baseline: the hook, transcript unchanged", "noop"),
        ("baseline: python -c pass", "pass"),
    ]
    lines = [
        "# The recording hook per turn (issue 43)",
        "",
        f"Medians of {args.sample} turns each, spawn to exit (ms). Early: the first turns of "
        f"the transcript; late: turns {turns - args.sample + 1}… of a {turns}-turn transcript "
        f"({size / 1e6:.1f} MB; each measured turn also adds one imported in the foreground). "
        f"Goal: ≤ {GOAL_MS} ms at 1,000 turns, not growing.",
        "",
        "| per turn | early | late | late ÷ early | late ÷ python -c pass |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label, key in rows:
        e, l_ = _ms(early[key]), _ms(late[key])
        lines.append(
            f"| {label} | {e:.0f} | {l_:.0f} | {l_ / e:.2f} | {l_ / _ms(late['pass']):.1f} |"
        )
    lines.append("")
    lines.append(f"early transcript: {early_turns} turns before the late phase was grown")
    text = "\n".join(lines) + "\n"
    print(text)
    write_results(RESULTS, text)


if __name__ == "__main__":
    main()
