"""The only two writers of ``checkpoint.json`` (CT-2): the prepare step and ``pin``/``unpin``.

Every write takes the execution's lock, re-reads and verifies the file (fail closed), changes it
and replaces it atomically, so two processes pinning at once both land and a hand-edited file is
never silently re-sealed.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from datetime import datetime

from alpstore.continuity.checkpoint import (
    KIND_SECTIONS,
    MAX_PIN_BYTES,
    PIN_SOURCES,
    SECTIONS,
    UNBOUND_POLICY,
    Checkpoint,
    Pin,
    read_checkpoint,
    write_checkpoint,
)
from alpstore.continuity.files import iso_now, locked
from alpstore.continuity.paths import ExecutionPaths
from alpstore.errors import ContinuityError, SecretError
from alpstore.rules.secrets import scan

INTERACTIVE_TASK_SENTINEL = "<interactive>"
"""The task an interactive session carries instead of a real one: never an objective (CT-5)."""

_CONTROL = "\x00-\x1f\x7f-\x9f\u2028\u2029"
_CONTROL_RUN = re.compile(rf"\s*[{_CONTROL}][\s{_CONTROL}]*")
_CONTROL_NOT_NEWLINE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def is_sentinel_task(task: str | None) -> bool:
    """True when ``task`` is the interactive sentinel (or blank), i.e. not an objective."""
    return task is None or not task.strip() or task.strip() == INTERACTIVE_TASK_SENTINEL


def collapse_control(text: str) -> str:
    """Collapse each run of control characters (and the blanks around it) into one space; strip.

    A pin is one sentence: newlines, tabs, escape sequences and line separators cannot smuggle a
    heading or a terminal command into the rendered injection.
    """
    return _CONTROL_RUN.sub(" ", text).strip()


def cut_utf8(text: str, limit: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 encoding fits in ``limit`` bytes."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit].decode("utf-8", errors="ignore").rstrip()


def pin_section(kind: str) -> str:
    """The checkpoint list a pin kind lives in.

    Raises:
        ContinuityError: the kind is not decision, constraint, open-item or next-action.
    """
    try:
        return KIND_SECTIONS[kind]
    except KeyError:
        raise ContinuityError(
            f"unknown pin kind {kind!r}", hint=f"use one of: {', '.join(KIND_SECTIONS)}"
        ) from None


def clean_objective(task: str | None) -> str | None:
    """Return the objective a task seeds: None for the interactive sentinel; controls dropped."""
    if task is None or is_sentinel_task(task):
        return None
    return _CONTROL_NOT_NEWLINE.sub("", task.replace("\r\n", "\n")).strip() or None


def _new_checkpoint(
    paths: ExecutionPaths, policy_hash: str, objective: str | None, stamp: str
) -> Checkpoint:
    return Checkpoint(
        execution_id=paths.execution_id,
        policy_hash=policy_hash,
        runtime=None,
        created_at=stamp,
        updated_at=stamp,
        objective=objective,
    )


def refuse_secret_looking(text: str) -> None:
    """Refuse pin text the secret scan flags (CK-11: a pin is never a credential store).

    The error names the kind of credential it looks like, never the text.

    Raises:
        SecretError: the text holds something shaped like a token or key.
    """
    findings = scan(text, "pin")
    if findings:
        raise SecretError(
            f"pin text looks like a credential ({findings[0].kind}); refusing to pin it, "
            "nothing was written",
            hint="keep credentials out of pins; if this is a false positive, pin it with "
            "--allow-secret-looking",
        )


def add_pin(
    paths: ExecutionPaths,
    kind: str,
    text: str,
    *,
    source: str = "principal",
    now: datetime | None = None,
    allow_secret_looking: bool = False,
) -> Pin:
    """Pin ``text`` under ``kind``; create the checkpoint (objective null, unbound) if missing.

    Text the secret scan flags is refused unless ``allow_secret_looking`` (a false positive).

    Raises:
        ContinuityError: unknown kind or source, empty or oversize text, checkpoint over 128 KiB.
        SecretError: the text looks like a credential (nothing is written).
        ValidationFinding: the existing checkpoint does not verify (nothing is written).
    """
    section = pin_section(kind)
    if source not in PIN_SOURCES:
        raise ContinuityError(
            f"unknown pin source {source!r}", hint=f"use one of: {', '.join(PIN_SOURCES)}"
        )
    text = collapse_control(text)
    if not text:
        raise ContinuityError("a pin needs text", hint='alpstore context pin decision -- "…"')
    size = len(text.encode("utf-8"))
    if size > MAX_PIN_BYTES:
        raise ContinuityError(
            f"pin text is {size} bytes, over the {MAX_PIN_BYTES // 1024} KiB limit",
            hint="a pin is one sentence, not a summary",
        )
    if not allow_secret_looking:
        refuse_secret_looking(text)
    stamp = iso_now(now)
    pin = Pin(id=str(uuid.uuid4()), text=text, source=source, created_at=stamp)
    with locked(paths.lock):
        current = read_checkpoint(paths) or _new_checkpoint(paths, UNBOUND_POLICY, None, stamp)
        sections = {name: current.pins(name) for name in SECTIONS}
        sections[section] = (*sections[section], pin)
        write_checkpoint(paths, current.with_sections(sections, stamp))
    return pin


def remove_pin(
    paths: ExecutionPaths, pin_id: str, *, now: datetime | None = None
) -> tuple[str, Pin]:
    """Unpin ``pin_id``; return the section it was in and the pin.

    Raises:
        ContinuityError: no checkpoint, or no pin with that id.
        ValidationFinding: the existing checkpoint does not verify (nothing is written).
    """
    with locked(paths.lock):
        current = read_checkpoint(paths)
        if current is None:
            raise ContinuityError(f"{paths.execution_id} has no checkpoint, so no pin {pin_id}")
        for name, pin in current.all_pins():
            if pin.id == pin_id:
                sections = {s: current.pins(s) for s in SECTIONS}
                sections[name] = tuple(p for p in sections[name] if p.id != pin_id)
                write_checkpoint(paths, current.with_sections(sections, iso_now(now)))
                return name, pin
    raise ContinuityError(
        f"{paths.execution_id} has no pin {pin_id}",
        hint=f"see the ids with: alpstore context status {paths.execution_id} --json",
    )


def prepare(
    paths: ExecutionPaths,
    policy_hash: str,
    *,
    task: str | None = None,
    seed: Mapping[str, tuple[Pin, ...]] | None = None,
    now: datetime | None = None,
) -> tuple[Checkpoint, bool]:
    """Seed the execution's checkpoint (CT-5); return it and whether anything was written.

    The objective comes from ``task`` (never the interactive sentinel); ``seed`` holds the pins of
    the thread snapshot the root opens on. A checkpoint already bound to ``policy_hash`` is left
    as it is; one created by an earlier ``pin`` is bound now, its pins kept after the seeded ones.

    Raises:
        ContinuityError: an empty policy hash, or a checkpoint bound to another policy.
        ValidationFinding: the existing checkpoint does not verify.
    """
    if not policy_hash.strip():
        raise ContinuityError("a prepare step needs a policy hash")
    objective = clean_objective(task)
    stamp = iso_now(now)
    seeded = {name: tuple((seed or {}).get(name, ())) for name in SECTIONS}
    with locked(paths.lock):
        current = read_checkpoint(paths)
        if current is not None and current.policy_hash == policy_hash:
            return current, False
        if current is not None and current.policy_hash != UNBOUND_POLICY:
            raise ContinuityError(
                f"{paths.execution_id} is already prepared under policy {current.policy_hash}",
                hint="an execution is prepared once; start a new execution for a new policy",
            )
        base = current or _new_checkpoint(paths, policy_hash, objective, stamp)
        taken = {pin.id for _, pin in base.all_pins()}
        sections = {
            name: (*(p for p in seeded[name] if p.id not in taken), *base.pins(name))
            for name in SECTIONS
        }
        result = Checkpoint(
            execution_id=paths.execution_id,
            policy_hash=policy_hash,
            runtime=base.runtime,
            created_at=base.created_at,
            updated_at=stamp,
            objective=base.objective if base.objective is not None else objective,
            sections=sections,
        )
        write_checkpoint(paths, result)
    return result, True
