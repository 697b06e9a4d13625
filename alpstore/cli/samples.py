"""`alpstore samples`: the sample conversation shipped with alpstore, for trying the commands."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from alpstore.cli._common import MAX_COUNT, echo
from alpstore.errors import UsageError

NAMES = ("conversation",)


def command(
    name: Annotated[
        str | None,
        typer.Argument(help="Which sample to print (default: list them).", show_default=False),
    ] = None,
    turns: Annotated[
        int | None,
        typer.Option(
            "--turns",
            min=1,
            max=MAX_COUNT,
            help="Generate this many user turns instead of the shipped 300 (deterministic).",
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of a generated conversation.")] = 7,
) -> None:
    """Print a sample to stdout: conversation is a 300-turn coding-agent conversation (OpenAI
    chat format, JSON Lines), also at alpstore/samples/conversation.jsonl in the package.
    """
    from alpstore.samples import generate, sample_path

    if name is None:
        echo(f"conversation\t{sample_path()}")
        return
    if name not in NAMES:
        raise UsageError(f"no sample {name!r}", hint=f"samples: {', '.join(NAMES)}")
    if turns is None:
        sys.stdout.buffer.write(sample_path().read_bytes())
        return
    for message in generate(turns, seed=seed):
        sys.stdout.write(json.dumps(message, ensure_ascii=False) + "\n")
