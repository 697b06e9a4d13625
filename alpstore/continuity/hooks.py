"""Claude Code hook plumbing: reading payloads, the SessionStart answer, and ``settings.json``.

Reinjection happens at SessionStart with source ``compact`` (the one point both runtimes agree on)
and also on ``resume``; PreCompact/PostCompact only feed the journal and are registered only when
the compaction bridge is switched on (JR-7). Installing merges into the user's settings without
disturbing their hooks; uninstalling removes exactly the commands it added.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alpstore.continuity.files import atomic_write
from alpstore.errors import InputError

REINJECT_SOURCES = ("compact", "resume")
"""SessionStart sources after which the continuity is injected again."""
MAX_PAYLOAD_BYTES = 8 * 1024 * 1024
"""A hook payload is read up to this size (a PostCompact summary is 22–32 KB)."""


def session_start_source(payload: bytes) -> str | None:
    """The ``source`` of a SessionStart payload, or None when the payload is not one."""
    try:
        doc = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    source = doc.get("source") if isinstance(doc, dict) else None
    return source if isinstance(source, str) else None


def session_start_output(text: str) -> dict[str, Any]:
    """The JSON Claude Code reads from a SessionStart hook to add ``text`` to the context."""
    return {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": text}}


@dataclass(frozen=True)
class HookEntry:
    """One hook registration: an event, an optional matcher and the command it runs."""

    event: str
    matcher: str | None
    command: str

    def group(self) -> dict[str, Any]:
        """The ``hooks.<event>[]`` element that registers this command."""
        group: dict[str, Any] = {} if self.matcher is None else {"matcher": self.matcher}
        group["hooks"] = [{"type": "command", "command": self.command}]
        return group


def hook_entries(executable: str, *, bridge: bool) -> list[HookEntry]:
    """The registrations alpstore makes; the compaction journal's only with ``bridge``."""
    start = f"{executable} hook session-start"
    entries = [HookEntry("SessionStart", source, start) for source in REINJECT_SOURCES]
    if bridge:
        entries += [
            HookEntry("PreCompact", None, f"{executable} hook compact-record pre --runtime claude"),
            HookEntry(
                "PostCompact", None, f"{executable} hook compact-record post --runtime claude"
            ),
        ]
    return entries


def settings_path(project: Path) -> Path:
    """A project's Claude Code settings file."""
    return project / ".claude" / "settings.json"


def _load_settings(path: Path) -> dict[str, Any]:
    """The settings object (empty when the file does not exist).

    Raises:
        InputError: the file is not a JSON object, or its ``hooks`` is not shaped as Claude's.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise InputError(f"{path}: unreadable ({exc.strerror or exc})") from exc
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not JSON ({exc}); left untouched") from exc
    if not isinstance(doc, dict):
        raise InputError(f"{path}: not a JSON object; left untouched")
    hooks = doc.get("hooks", {})
    if not isinstance(hooks, dict) or not all(isinstance(v, list) for v in hooks.values()):
        raise InputError(f"{path}: 'hooks' is not an object of lists; left untouched")
    return doc


def _save_settings(path: Path, doc: dict[str, Any]) -> None:
    atomic_write(path, (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def _commands(group: Any) -> list[str]:
    hooks = group.get("hooks") if isinstance(group, dict) else None
    if not isinstance(hooks, list):
        return []
    return [
        h["command"] for h in hooks if isinstance(h, dict) and isinstance(h.get("command"), str)
    ]


def install(path: Path, entries: list[HookEntry]) -> list[HookEntry]:
    """Add each entry not already registered (same event, matcher and command); return those added.

    Raises:
        InputError: the settings file is malformed (it is left untouched).
        StorageError: the file could not be written.
    """
    doc = _load_settings(path)
    hooks: dict[str, Any] = doc.setdefault("hooks", {})
    added: list[HookEntry] = []
    for entry in entries:
        groups: list[Any] = hooks.setdefault(entry.event, [])
        present = any(
            entry.command in _commands(g)
            and (g.get("matcher") if isinstance(g, dict) else None) == entry.matcher
            for g in groups
        )
        if not present:
            groups.append(entry.group())
            added.append(entry)
    if added:
        _save_settings(path, doc)
    return added


def uninstall(path: Path, entries: list[HookEntry]) -> int:
    """Remove the hook commands of ``entries``, and the groups and events only they filled.

    Returns how many commands were removed; the user's other hooks stay exactly as they were.

    Raises:
        InputError: the settings file is malformed (it is left untouched).
        StorageError: the file could not be written.
    """
    if not path.exists():
        return 0
    doc = _load_settings(path)
    hooks: dict[str, Any] = doc.get("hooks", {})
    ours: dict[str, set[str]] = {}
    for entry in entries:
        ours.setdefault(entry.event, set()).add(entry.command)
    removed = 0
    for event, commands in ours.items():
        groups = hooks.get(event)
        if not groups:
            continue
        kept_groups: list[Any] = []
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(inner, list):
                kept_groups.append(group)
                continue
            kept = [h for h in inner if not (isinstance(h, dict) and h.get("command") in commands)]
            removed += len(inner) - len(kept)
            if kept or not inner:  # a group emptied by us goes; one the user left empty stays
                kept_groups.append({**group, "hooks": kept})
        if kept_groups:
            hooks[event] = kept_groups
        else:
            del hooks[event]
    if removed:
        if "hooks" in doc and not hooks:
            del doc["hooks"]
        _save_settings(path, doc)
    return removed
