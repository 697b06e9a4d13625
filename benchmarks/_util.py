"""Shared helpers for the benchmarks: workloads built from the sample generator."""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from alpstore.samples import generate


def turns_of(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Split a message list into user turns."""
    turns: list[list[dict[str, Any]]] = []
    for m in messages:
        if not turns or (
            m.get("role") == "user" and any(x.get("role") == "user" for x in turns[-1])
        ):
            turns.append([m])
        else:
            turns[-1].append(m)
    return turns


def conversation_turns(n: int, seed: int = 7) -> list[list[dict[str, Any]]]:
    """A generated coding-agent conversation of ``n`` turns."""
    return turns_of(list(generate(n, seed=seed)))


def realistic_messages(n: int, seed: int = 3) -> list[dict[str, Any]]:
    """``n`` distinct messages of 0.2–8 KB: prompts, tool calls, tool outputs, replies."""
    rng = random.Random(seed)
    pool = [m for m in generate(2000, seed=seed) if m.get("content") or m.get("tool_calls")]
    out = []
    for i in range(n):
        m = dict(pool[i % len(pool)])
        text = m.get("content") or ""
        if len(text) < 200:
            text = (text + " ") * (200 // max(1, len(text)) + 1)
        text = text[: rng.randint(200, 8000)]
        m["content"] = f"{text} #{i}"
        out.append(m)
    return out


def four_message_turns(n: int) -> Iterator[list[dict[str, Any]]]:
    """The agent of issue 3: four messages a turn (prompt, tool call, tool output, reply)."""
    for t in range(n):
        yield [
            {"role": "user", "content": f"step {t}: please continue with the refactor"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{t}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": f'{{"cmd": "pytest -k t{t}"}}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"call_{t}", "content": f"{t % 97} passed in 0.{t}s"},
            {"role": "assistant", "content": f"Turn {t} done; the tests pass."},
        ]


def structure_bytes(db_path: Path) -> dict[str, int]:
    """Pages in use per table/index (SQLite dbstat), in bytes."""
    con = sqlite3.connect(db_path)
    try:
        return {
            name: int(size)
            for name, size in con.execute(
                "SELECT name, SUM(pgsize - unused) FROM dbstat GROUP BY name"
            )
        }
    finally:
        con.close()


def file_bytes(root: Path) -> int:
    """Every file of the archive folder (database, WAL, shared memory)."""
    return sum(p.stat().st_size for p in (root / "traces" / "archive").iterdir())


def checkpointed_bytes(path: Path) -> int:
    """A SQLite database's size with its WAL folded in (checkpointed first, as when closed):
    the database file and what is left of its ``-wal``. Not the ``-shm`` file: a 32 KB index
    of the WAL that exists while a connection is open and goes with the last one (counting it,
    as this did until the measuring connection was closed first, added 32 KB to every size).
    """
    con = sqlite3.connect(path)
    try:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        con.close()
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def write_results(path: Path, text: str) -> None:
    """Write a benchmark's Markdown section (``benchmarks/results/…``), creating the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def best_of(fn: Callable[[], Any], rounds: int = 3) -> float:
    """The fastest of ``rounds`` calls of ``fn``, in seconds (wall)."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best
