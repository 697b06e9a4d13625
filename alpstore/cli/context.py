"""`alpstore context`: an execution's continuity checkpoint, its pins, render, status and settle."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from alpstore.cli._common import echo, print_json, warn
from alpstore.continuity.checkpoint import KIND_SECTIONS, MAX_PIN_BYTES, read_checkpoint
from alpstore.continuity.files import atomic_write
from alpstore.continuity.journal import rotate_if_needed
from alpstore.continuity.paths import ExecutionPaths
from alpstore.continuity.pins import (
    add_pin,
    collapse_control,
    cut_utf8,
    prepare,
    refuse_secret_looking,
    remove_pin,
)
from alpstore.continuity.render import MAX_RENDER_BYTES, render
from alpstore.continuity.status import status
from alpstore.continuity.threads import latest_pins, revisions, settle
from alpstore.errors import ContinuityError, UsageError, ValidationFinding

app = typer.Typer(
    help="Execution continuity: the checkpoint an execution must not forget across compactions "
    "(objective and pins), its render for reinjection, the compaction journal, thread settle.",
    no_args_is_help=True,
)

ENV_HOME = "ALP_HOME"
ENV_EXECUTION = "ALP_EXECUTION_ID"
DEFAULT_SOURCE = "principal"
"""Who a pin typed at the command line comes from, unless ``--source`` says otherwise."""

ExecutionArg = Annotated[
    str | None,
    typer.Argument(
        metavar="EXEC_ID",
        help=f"Execution id (default: ${ENV_EXECUTION}, when inside an execution).",
        show_default=False,
    ),
]
ExecutionOpt = Annotated[
    str | None,
    typer.Option(
        "--execution",
        "-x",
        help=f"Execution id (default: ${ENV_EXECUTION}, when inside an execution).",
        show_default=False,
    ),
]


def alp_home() -> Path:
    """``$ALP_HOME``, by default ``~/.alp``."""
    return Path(os.environ.get(ENV_HOME) or "~/.alp").expanduser()


def execution_paths(execution_id: str | None) -> ExecutionPaths:
    """The execution named on the command line, else the one we are inside; never a guess (CT-9).

    Raises:
        UsageError: no id given and ``ALP_EXECUTION_ID`` is not set.
        ContinuityError: the id is not a valid execution id.
    """
    chosen = execution_id or os.environ.get(ENV_EXECUTION)
    if not chosen:
        raise UsageError(
            "no execution: not inside one and no id given",
            hint=f"pass the execution id, or set {ENV_EXECUTION}",
        )
    return ExecutionPaths.of(alp_home(), chosen)


@app.command("prepare")
def prepare_command(
    execution_id: Annotated[str, typer.Argument(metavar="EXEC_ID", help="Execution id.")],
    policy_hash: Annotated[
        str, typer.Option("--policy-hash", help="Hash of the policy the execution runs under.")
    ],
    task: Annotated[
        str | None,
        typer.Option(
            "--task", help="The task; it becomes the objective (the interactive sentinel does not)."
        ),
    ] = None,
    thread: Annotated[
        str | None,
        typer.Option("--thread", help="Seed the pins from this thread's latest context."),
    ] = None,
) -> None:
    """Seed the execution's checkpoint.json: objective from the task, pins from the thread."""
    paths = ExecutionPaths.of(alp_home(), execution_id)
    seed = latest_pins(alp_home(), thread) if thread else None
    if thread and not revisions(alp_home(), thread):
        warn(f"thread {thread} has no settled context yet; no pins seeded from it")
    checkpoint, written = prepare(paths, policy_hash, task=task, seed=seed)
    seeded = sum(len(v) for v in (seed or {}).values())
    if written:
        echo(
            f"prepared {paths.execution_id}: objective {_short(checkpoint.objective)}, "
            f"{seeded} pin(s) from thread {thread}"
            if thread
            else f"prepared {paths.execution_id}: objective {_short(checkpoint.objective)}"
        )
    else:
        echo(f"{paths.execution_id} is already prepared under this policy; unchanged")


@app.command("pin")
def pin_command(
    kind: Annotated[
        str, typer.Argument(metavar="KIND", help=f"One of: {', '.join(KIND_SECTIONS)}.")
    ],
    text: Annotated[
        list[str],
        typer.Argument(metavar="-- TEXT", help='The pin: one sentence (put it after "--").'),
    ],
    execution: ExecutionOpt = None,
    source: Annotated[
        str,
        typer.Option("--source", help="Who pins it: principal, agent or execution."),
    ] = DEFAULT_SOURCE,
    strict: Annotated[
        bool,
        typer.Option("--strict", help="Refuse text over 4 KiB instead of cutting it."),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the new pin as JSON.")] = False,
    allow_secret_looking: Annotated[
        bool,
        typer.Option(
            "--allow-secret-looking",
            help="Pin text the secret scan flags as a credential (AWS key, API token, private "
            "key …). Without it such a pin is refused: use it only for a false positive.",
        ),
    ] = False,
) -> None:
    """Pin a decision, constraint, open item or next action (creates the checkpoint if needed).

    Pins must not hold secrets: text that looks like a credential is refused (exit 9) unless
    --allow-secret-looking says it is a false positive.
    """
    paths = execution_paths(execution)
    cleaned = collapse_control(" ".join(text))
    if not allow_secret_looking:  # before anything else: the text is never echoed back
        refuse_secret_looking(cleaned)
    size = len(cleaned.encode("utf-8"))
    if size > MAX_PIN_BYTES:
        if strict:
            raise ContinuityError(
                f"pin text is {size} bytes, over the {MAX_PIN_BYTES // 1024} KiB limit",
                hint="a pin is one sentence, not a summary",
            )
        cleaned = cut_utf8(cleaned, MAX_PIN_BYTES)
        warn(f"pin text was {size} bytes; cut to {MAX_PIN_BYTES // 1024} KiB")
    pin = add_pin(paths, kind, cleaned, source=source, allow_secret_looking=allow_secret_looking)
    if as_json:
        print_json({"kind": kind, **pin.to_json()})
    else:
        echo(f"pinned {kind} {pin.id}")


@app.command("unpin")
def unpin_command(
    pin_id: Annotated[str, typer.Argument(metavar="ID", help="The pin's id.")],
    execution: ExecutionOpt = None,
) -> None:
    """Remove a pin by its id."""
    section, pin = remove_pin(execution_paths(execution), pin_id)
    echo(f"unpinned {pin.id} from {section}")


@app.command("render")
def render_command(execution_id: ExecutionArg = None) -> None:
    """Write continuity.md (what is reinjected after a compaction) and print it."""
    paths = execution_paths(execution_id)
    checkpoint = read_checkpoint(paths)
    if checkpoint is None:
        raise ContinuityError(
            f"{paths.execution_id} has no checkpoint to render",
            hint='seed it: alpstore context prepare, or alpstore context pin KIND -- "…"',
        )
    rendering = render(checkpoint)
    atomic_write(paths.continuity_md, rendering.text.encode("utf-8"))
    if rendering.dropped:
        cut = ", ".join(f"{name} {n}" for name, n in rendering.dropped.items())
        warn(
            f"render was {rendering.full_bytes} bytes, over {MAX_RENDER_BYTES // 1024} KiB; "
            f"cut {cut}"
        )
    echo(rendering.text.rstrip("\n"))


@app.command("status")
def status_command(
    execution_id: ExecutionArg = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Objective, pins, sizes against limits, digest state and compaction journal figures."""
    report = status(execution_paths(execution_id))
    if as_json:
        print_json(report)
        return
    for label, value in _status_lines(report):
        echo(f"{label:<12} {value}")


def _status_lines(report: dict[str, Any]) -> list[tuple[str, str]]:
    lines = [("execution", report["executionId"])]
    if "pins" in report:
        pins = report["pins"]
        sizes = report["sizes"]
        lines += [
            ("objective", _short(report["objective"])),
            ("policy", report["policyHash"] or "(unbound: not prepared yet)"),
            (
                "pins",
                f"decisions {pins['decisions']}, constraints {pins['constraints']}, "
                f"open items {pins['openItems']}, next actions {pins['nextActions']}",
            ),
            ("checkpoint", _against(sizes["checkpointBytes"], sizes["checkpointLimit"])),
            ("largest pin", _against(sizes["largestPinBytes"], sizes["pinLimit"])),
            ("render", _against(sizes["renderBytes"], sizes["renderLimit"])),
        ]
    digest = report["digest"]
    lines.append(("digest", f"{digest}: {report['problem']}" if "problem" in report else digest))
    journal = report["journal"]
    pending = journal["pending"]
    last = journal["lastCompleted"]
    lines.append(
        (
            "journal",
            f"generation {journal['generation']}, "
            f"pending {_event(pending) if pending else 'none'}, "
            f"lastCompleted {_event(last) if last else 'none'}, "
            f"droppedLines {journal['droppedLines']}",
        )
    )
    return lines


def _event(event: dict[str, Any]) -> str:
    return f"{event['at']} ({event['runtime']}, {event['trigger']})"


def _against(size: int, limit: int) -> str:
    share = 100 * size / limit
    flag = "  OVER" if size > limit else ""
    return f"{size} B of {limit // 1024} KiB ({share:.0f}%){flag}"


def _short(text: str | None, width: int = 72) -> str:
    if text is None:
        return "(none)"
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= width else one_line[: width - 1] + "…"


@app.command("validate")
def validate_command(
    execution_id: ExecutionArg = None,
    policy_hash: Annotated[
        str | None,
        typer.Option("--policy-hash", help="Also check the checkpoint is bound to this policy."),
    ] = None,
) -> None:
    """Recompute checkpoint.json's digest, check schema and binding (exit 13 on a finding)."""
    paths = execution_paths(execution_id)
    rotate_if_needed(paths)
    checkpoint = read_checkpoint(paths, policy_hash=policy_hash)
    if checkpoint is None:
        raise ValidationFinding(f"{paths.execution_id}: no checkpoint.json")
    pins = len(checkpoint.all_pins())
    echo(f"{paths.execution_id}: checkpoint.json ok ({pins} pin(s), digest verified)")


@app.command("settle")
def settle_command(
    execution_id: Annotated[str, typer.Argument(metavar="EXEC_ID", help="Execution id.")],
    thread: Annotated[str, typer.Option("--thread", help="The thread to project into.")],
) -> None:
    """Project the checkpoint into the thread's next context revision (deterministic)."""
    settled = settle(alp_home(), execution_id, thread)
    echo(
        f"settled {execution_id} into thread {settled.thread_id} rev {settled.rev}: {settled.path}"
    )
