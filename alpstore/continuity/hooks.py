"""Claude Code hook plumbing: reading payloads, the SessionStart answer, and ``settings.json``.

Reinjection happens at SessionStart with source ``compact`` (the one point both runtimes agree on)
and also on ``resume``; PreCompact/PostCompact only feed the journal and are registered only when
the compaction bridge is switched on (JR-7). Installing merges into the user's settings without
disturbing their hooks; uninstalling removes exactly the commands it added.
"""

from __future__ import annotations

import json
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alpstore.errors import InputError
from alpstore.fileio import atomic_write, write_target

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


RECORD_EVENTS = ("Stop", "SubagentStop", "PreCompact")
"""The Claude Code events after which the recording hook imports the transcript's new records."""


def record_entries(command: str) -> list[HookEntry]:
    """The recording hook's registrations (``command`` runs ``alpstore.cli.record_hook``)."""
    return [HookEntry(event, None, command) for event in RECORD_EVENTS]


RECORD_MARK = "alpstore.cli.record_hook"
"""What every recording hook command runs (whatever its interpreter and run root)."""


def installed_record_entries(path: Path) -> list[HookEntry]:
    """The recording hook commands registered in a settings file, whatever run root each
    names (so uninstalling needs no --root).

    Raises:
        InputError: the settings file is malformed.
    """
    if not path.exists():
        return []
    hooks = _load_settings(path).doc.get("hooks")
    found: list[HookEntry] = []
    for event in RECORD_EVENTS:
        groups = hooks.get(event) if isinstance(hooks, dict) else None
        for group in groups if isinstance(groups, list) else []:
            matcher = group.get("matcher") if isinstance(group, dict) else None
            inner = group.get("hooks") if isinstance(group, dict) else None
            for hook in inner if isinstance(inner, list) else []:
                command = hook.get("command") if isinstance(hook, dict) else None
                if isinstance(command, str) and RECORD_MARK in command:
                    found.append(HookEntry(event, matcher, command))
    return found


def settings_path(project: Path) -> Path:
    """A project's Claude Code settings file."""
    return project / ".claude" / "settings.json"


BOM = b"\xef\xbb\xbf"
BACKUP_SUFFIX = ".alpstore-backup"
"""Beside the settings file: its bytes as they were before our last change."""


@dataclass
class Settings:
    """A settings file as read: the document, and what writing it back must keep."""

    doc: dict[str, Any]
    original: bytes | None
    bom: bool = False


def _exact(path: Path, what: str) -> InputError:
    return InputError(
        f"{path}: {what}, which cannot be written back exactly; left untouched",
        hint="fix that value by hand (Claude Code cannot read it either), then run this again",
    )


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_strings(path: Path, value: Any) -> None:
    r"""Refuse lone surrogates (``"\ud800"`` in the file): they cannot be encoded as UTF-8."""
    stack = [value]
    while stack:
        item = stack.pop()
        texts: list[Any] = []
        if isinstance(item, dict):
            texts, more = list(item.keys()), list(item.values())
            stack.extend(more)
        elif isinstance(item, list):
            stack.extend(item)
        else:
            texts = [item]
        for text in texts:
            if isinstance(text, str):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    raise _exact(path, f"a string holds a lone surrogate ({text!a:.40})") from None


def _load_settings(path: Path) -> Settings:
    """The settings object (empty when the file does not exist), refusing what we could not
    write back byte-for-value exactly: NaN/Infinity, numbers beyond a double (``1e400``), lone
    surrogates and duplicate keys.

    Raises:
        InputError: the file is not a JSON object, its ``hooks`` is not shaped as Claude's, or
            it holds a value that would change on the way back.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Settings({}, None)
    except OSError as exc:
        raise InputError(f"{path}: unreadable ({exc.strerror or exc})") from exc
    bom = data.startswith(BOM)

    def finite(text: str) -> float:
        value = float(text)
        if value in (float("inf"), float("-inf")):
            raise _exact(path, f"the number {text[:40]} is beyond a double")
        return value

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        for key, value in pairs:
            if key in doc:
                raise _exact(path, f"the key {key!a:.40} appears twice in one object")
            doc[key] = value
        return doc

    try:
        doc = json.loads(
            data[len(BOM) :].decode("utf-8") if bom else data.decode("utf-8"),
            parse_constant=_refuse_constant,
            parse_float=finite,
            object_pairs_hook=unique,
        )
    except InputError:
        raise
    except RecursionError as exc:
        raise InputError(f"{path}: not JSON (nested too deeply); left untouched") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not JSON ({exc}); left untouched") from exc
    if not isinstance(doc, dict):
        raise InputError(f"{path}: not a JSON object; left untouched")
    _check_strings(path, doc)
    hooks = doc.get("hooks", {})
    if not isinstance(hooks, dict) or not all(isinstance(v, list) for v in hooks.values()):
        raise InputError(f"{path}: 'hooks' is not an object of lists; left untouched")
    return Settings(doc, data, bom)


def backup_path(path: Path) -> Path:
    """Where the settings file's previous bytes are kept."""
    return path.with_name(path.name + BACKUP_SUFFIX)


def _save_settings(path: Path, settings: Settings) -> None:
    """Write the settings back: through a symlink, keeping the file's mode, after a backup of
    the previous bytes beside it (same mode).
    """
    text = json.dumps(settings.doc, indent=2, ensure_ascii=False) + "\n"
    data = (BOM if settings.bom else b"") + text.encode("utf-8")
    if settings.original is not None:
        mode = stat.S_IMODE(write_target(path).stat().st_mode)
        atomic_write(backup_path(path), settings.original, mode=mode)
    atomic_write(path, data)


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
    settings = _load_settings(path)
    hooks: dict[str, Any] = settings.doc.setdefault("hooks", {})
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
        _save_settings(path, settings)
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
    settings = _load_settings(path)
    doc = settings.doc
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
        _save_settings(path, settings)
    return removed
