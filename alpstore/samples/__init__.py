"""A deterministic generator of coding-agent conversations, and the sample shipped with alpstore.
Kernel level: imports the standard library only.

The generator models what an agent such as Claude Code or Codex exchanges while working on a
repository: user requests, assistant replies with tool calls (read a file, run tests, grep, edit),
tool outputs (file contents that change as edits land, test logs, listings) and summaries of what
was done. Used by the demo, the tutorial, the tests and the benchmarks.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

SAMPLE_NAME = "conversation.jsonl"

_MODULES = [
    "store",
    "cache",
    "parser",
    "router",
    "auth",
    "billing",
    "queue",
    "metrics",
    "config",
    "scheduler",
    "export",
    "search",
]
_VERBS = ["add", "fix", "refactor", "speed up", "document", "test", "rename", "split"]
_THINGS = [
    "the retry logic",
    "the config loader",
    "pagination",
    "the error messages",
    "input validation",
    "the CSV export",
    "token refresh",
    "the cache eviction",
    "the date parsing",
    "logging",
    "the health check",
    "rate limiting",
]
_WORDS = [
    "value",
    "result",
    "item",
    "record",
    "entry",
    "batch",
    "index",
    "offset",
    "limit",
    "cursor",
    "payload",
    "request",
    "response",
    "handler",
    "client",
    "server",
    "token",
    "session",
    "window",
    "buffer",
    "chunk",
]


def sample_path() -> Path:
    """The conversation shipped with the package (OpenAI chat format, one message a line)."""
    return Path(str(resources.files("alpstore.samples").joinpath(SAMPLE_NAME)))


def _function(rng: random.Random, name: str) -> str:
    args = ", ".join(rng.sample(_WORDS, rng.randint(1, 3)))
    body = []
    for _ in range(rng.randint(3, 9)):
        a, b = rng.sample(_WORDS, 2)
        body.append(
            rng.choice(
                [
                    f"    {a} = {b}.get({a!r}, {rng.randint(0, 99)})",
                    f"    if not {a}:\n        raise ValueError('{a} is required for {name}')",
                    f"    for {a} in {b}:\n        total += len({a})",
                    f"    {a} = [x for x in {b} if x is not None]",
                    f"    log.debug('{name}: %s %s', {a}, {b})",
                ]
            )
        )
    return (
        f'def {name}({args}):\n    """{name.replace("_", " ").capitalize()}."""\n'
        + "\n".join(body)
        + f"\n    return {rng.choice(_WORDS)}\n"
    )


class _Repo:
    """A small virtual repository whose files change as the agent edits them."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.files: dict[str, list[str]] = {}
        for mod in _MODULES:
            funcs = [
                _function(rng, f"{rng.choice(_WORDS)}_{rng.choice(_WORDS)}")
                for _ in range(rng.randint(4, 10))
            ]
            self.files[f"src/app/{mod}.py"] = [
                "import logging\n\nlog = logging.getLogger(__name__)\n",
                *funcs,
            ]

    def read(self, path: str) -> str:
        return "\n\n".join(self.files[path])

    def edit(self, path: str) -> str:
        funcs = self.files[path]
        i = self.rng.randrange(1, len(funcs))
        funcs[i] = _function(self.rng, f"{self.rng.choice(_WORDS)}_{self.rng.choice(_WORDS)}")
        return funcs[i]


def _call(rng: random.Random, turn: int, n: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"call_{turn:05d}_{n}_{rng.randrange(16**6):06x}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def _test_log(rng: random.Random, module: str, failing: bool) -> str:
    lines = [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.11.7, pytest-8.3.4, pluggy-1.5.0",
        f"collected {rng.randint(20, 140)} items",
        "",
    ]
    for mod in rng.sample(_MODULES, 5):
        dots = "".join(
            rng.choice("....F" if failing and mod == module else ".....")
            for _ in range(rng.randint(5, 30))
        )
        lines.append(f"tests/test_{mod}.py {dots}")
    if failing:
        lines += [
            "",
            "=================================== FAILURES ===================================",
            f"______________________ test_{module}_{rng.choice(_WORDS)} ______________________",
            f"E       AssertionError: expected {rng.randint(1, 9)} got {rng.randint(10, 99)}",
            f"src/app/{module}.py:{rng.randint(10, 200)}: AssertionError",
        ]
    lines.append(
        f"======================== {rng.randint(20, 140)} passed in {rng.random() * 9:.2f}s "
        "========================"
    )
    return "\n".join(lines)


def generate(turns: int, *, seed: int = 7, bad_turn: int | None = None) -> Iterator[dict[str, Any]]:
    """Yield the messages of a ``turns``-turn coding-agent conversation (OpenAI chat format).

    ``bad_turn`` plants a turn where the agent runs ``rm -rf build/ --no-preserve-root``: the
    "bad" turn the tutorial and the bisect tests look for.
    """
    rng = random.Random(seed)
    repo = _Repo(rng)
    paths = sorted(repo.files)
    yield {
        "role": "system",
        "content": "You are a careful coding agent working in a Python "
        "repository. Use the tools to read files, run commands and edit code. Explain what "
        "you change and why.",
    }
    for turn in range(1, turns + 1):
        path = rng.choice(paths)
        module = path.rsplit("/", 1)[1][:-3]
        request = f"Please {rng.choice(_VERBS)} {rng.choice(_THINGS)} in {module}."
        if rng.random() < 0.3:
            request += (
                f" The tests in tests/test_{module}.py started failing after the last change."
            )
        yield {"role": "user", "content": request}
        kind = rng.random()
        n = 0
        if turn == bad_turn:
            call = _call(rng, turn, n, "bash", {"command": "rm -rf build/ --no-preserve-root"})
            yield {"role": "assistant", "content": None, "tool_calls": [call]}
            yield {"role": "tool", "tool_call_id": call["id"], "content": "removed 1832 files"}
            yield {"role": "assistant", "content": "I cleaned the build directory."}
            continue
        if kind < 0.45:
            call = _call(rng, turn, n, "read_file", {"path": path})
            yield {
                "role": "assistant",
                "content": f"Let me look at {path} first.",
                "tool_calls": [call],
            }
            yield {"role": "tool", "tool_call_id": call["id"], "content": repo.read(path)}
        elif kind < 0.7:
            call = _call(rng, turn, n, "bash", {"command": f"pytest -q tests/test_{module}.py"})
            yield {"role": "assistant", "content": None, "tool_calls": [call]}
            yield {
                "role": "tool",
                "tool_call_id": call["id"],
                "content": _test_log(rng, module, rng.random() < 0.4),
            }
        else:
            word = rng.choice(_WORDS)
            call = _call(rng, turn, n, "grep", {"pattern": word, "path": "src/"})
            hits = [
                f"{p}:{rng.randint(1, 300)}:    {word} = {rng.choice(_WORDS)}"
                for p in rng.sample(paths, rng.randint(2, 6))
            ]
            yield {"role": "assistant", "content": None, "tool_calls": [call]}
            yield {"role": "tool", "tool_call_id": call["id"], "content": "\n".join(hits)}
        n += 1
        new = repo.edit(path)
        call = _call(rng, turn, n, "edit_file", {"path": path, "new_text": new})
        yield {"role": "assistant", "content": f"I'll update {path}.", "tool_calls": [call]}
        yield {"role": "tool", "tool_call_id": call["id"], "content": f"Edited {path}: 1 hunk."}
        yield {
            "role": "assistant",
            "content": (
                f"Done: I changed `{new.split('(')[0][4:]}` in {path} to {rng.choice(_VERBS)} "
                f"{rng.choice(_THINGS)}. "
                + " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 40)))
                + "."
            ),
        }


def write_jsonl(path: Path, turns: int, *, seed: int = 7, bad_turn: int | None = None) -> int:
    """Write a generated conversation to ``path``; returns the number of messages."""
    count = 0
    with path.open("w", encoding="utf-8") as handle:
        for message in generate(turns, seed=seed, bad_turn=bad_turn):
            handle.write(json.dumps(message, ensure_ascii=False) + "\n")
            count += 1
    return count
