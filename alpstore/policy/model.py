"""``spec.checkpoint`` of an Agent manifest: strict parsing, defaults and inference (CK-1…CK-4).

Parsing is strict the way mas-lab's is: an unknown key, a wrong type or a boolean posing as an
integer is an error naming the key path (``spec.checkpoint.retention.n``). Duplicate triggers are
collapsed keeping the first. Storage omitted is inferred from the mode (CK-2) unless a workspace
config enables a store (CK-7); storage given in the spec always wins.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from alpstore.errors import PolicyError

Mode = Literal["none", "in_memory", "on_event", "every_turn"]
StorageKind = Literal["memory", "disk", "hybrid"]
Trigger = Literal["after_llm_call", "after_tool_call", "before_destructive_tool", "every_n_turns"]
RetentionMode = Literal["all", "single", "last_n"]
Portability = Literal["self_contained", "reference"]

MODES: Final = ("none", "in_memory", "on_event", "every_turn")
STORAGE_KINDS: Final = ("memory", "disk", "hybrid")
TRIGGERS: Final = ("after_llm_call", "after_tool_call", "before_destructive_tool", "every_n_turns")
RETENTION_MODES: Final = ("all", "single", "last_n")
PORTABILITY_ALIASES: Final[dict[str, Portability]] = {
    "self_contained": "self_contained",
    "deep": "self_contained",
    "reference": "reference",
    "shallow": "reference",
}

MAX_COUNT: Final = 2**31 - 1
"""Largest ``every_n_turns`` or ``retention.n`` (a database integer column on every backend)."""

DEFAULT_MODE: Final[Mode] = "none"
DEFAULT_RETENTION_MODE: Final[RetentionMode] = "all"
DEFAULT_RETENTION_N: Final = 5
DEFAULT_PORTABILITY: Final[Portability] = "self_contained"
DEFAULT_AUTO_RESUME: Final = False

POLICY_KEYS: Final = (
    "mode",
    "storage",
    "triggers",
    "every_n_turns",
    "retention",
    "portability",
    "auto_resume_latest",
)
STORAGE_KEYS: Final = ("kind", "path")
RETENTION_KEYS: Final = ("mode", "n")

INFERRED_STORAGE: Final[dict[str, StorageKind | None]] = {
    "none": None,
    "in_memory": "memory",
    "on_event": "disk",
    "every_turn": "disk",
}
"""CK-2: the store a mode implies when neither the spec nor the workspace names one."""

StorageSource = Literal["spec", "workspace", "inferred", "none"]


@dataclass(frozen=True)
class Retention:
    """Which of a session's checkpoints to keep (CK-8: only that session's are ever pruned).

    ``mode``: ``all`` keeps everything, ``single`` the newest only, ``last_n`` the newest ``n``.
    """

    mode: RetentionMode = DEFAULT_RETENTION_MODE
    n: int = DEFAULT_RETENTION_N

    def keep(self) -> int | None:
        """How many checkpoints to keep, or None for all."""
        if self.mode == "all":
            return None
        if self.mode == "single":
            return 1
        return self.n


@dataclass(frozen=True)
class CheckpointPolicy:
    """A parsed, validated ``spec.checkpoint``.

    Fields:
        mode: when to capture automatically (CK-4).
        storage: where payloads live after inference; None = no automatic store (mode none
            with nothing configured — manual saves still go to the checkpoint directory).
        storage_path: ``storage.path`` as written, or None.
        storage_source: where ``storage`` came from: the spec, the workspace, the mode, or none.
        triggers: on_event triggers in order, duplicates collapsed.
        every_n_turns: the every_n_turns cadence, or None.
        retention: retention rule for this session's checkpoints.
        portability: ``self_contained`` (deep) or ``reference`` (shallow), aliases resolved.
        auto_resume_latest: resume the newest matching version 2 file on open (CK-9).
    """

    mode: Mode = DEFAULT_MODE
    storage: StorageKind | None = None
    storage_path: str | None = None
    storage_source: StorageSource = "none"
    triggers: tuple[Trigger, ...] = ()
    every_n_turns: int | None = None
    retention: Retention = field(default_factory=Retention)
    portability: Portability = DEFAULT_PORTABILITY
    auto_resume_latest: bool = DEFAULT_AUTO_RESUME

    @property
    def persists_to_disk(self) -> bool:
        """True when checkpoints are written as files (disk or hybrid)."""
        return self.storage in ("disk", "hybrid")

    def as_dict(self) -> dict[str, Any]:
        """The fully resolved policy as plain data (what `session open` reports)."""
        storage: dict[str, Any] | None = None
        if self.storage is not None:
            storage = {"kind": self.storage, "path": self.storage_path}
        out: dict[str, Any] = {
            "mode": self.mode,
            "storage": storage,
            "storage_source": self.storage_source,
            "triggers": list(self.triggers),
            "every_n_turns": self.every_n_turns,
            "retention": {"mode": self.retention.mode, "n": self.retention.n},
            "portability": self.portability,
            "auto_resume_latest": self.auto_resume_latest,
        }
        return out


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, Mapping):
        return "mapping"
    return type(value).__name__


def _choice(value: Any, choices: tuple[str, ...], where: str) -> str:
    if not isinstance(value, str):
        raise PolicyError(f"{where}: expected one of {', '.join(choices)}, got {_type_name(value)}")
    if value not in choices:
        raise PolicyError(f"{where}: {value!r} is not one of {', '.join(choices)}")
    return value


def _positive_int(value: Any, where: str) -> int:
    if type(value) is not int:
        raise PolicyError(f"{where}: expected a positive integer, got {_type_name(value)}")
    if value < 1:
        raise PolicyError(f"{where}: expected a positive integer, got {value}")
    if value > MAX_COUNT:
        shown = str(value) if len(str(value)) <= 24 else f"{str(value)[:20]}…"
        raise PolicyError(f"{where}: {shown} is out of range (at most {MAX_COUNT})")
    return value


def _mapping(value: Any, where: str, keys: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PolicyError(f"{where}: expected a mapping, got {_type_name(value)}")
    for key in value:
        if key not in keys:
            raise PolicyError(f"{where}.{key}: unknown key (expected one of {', '.join(keys)})")
    return value


def _parse_storage(value: Any, where: str) -> tuple[StorageKind, str | None]:
    if isinstance(value, str):
        kind = _choice(value, STORAGE_KINDS, where)
        return kind, None  # type: ignore[return-value]
    if not isinstance(value, Mapping):
        raise PolicyError(
            f"{where}: expected memory, disk, hybrid or {{kind, path}}, got {_type_name(value)}"
        )
    body = _mapping(value, where, STORAGE_KEYS)
    if "kind" not in body:
        raise PolicyError(f"{where}.kind: required (memory, disk or hybrid)")
    kind = _choice(body["kind"], STORAGE_KINDS, f"{where}.kind")
    path = body.get("path")
    if path is not None and (not isinstance(path, str) or not path.strip()):
        raise PolicyError(f"{where}.path: expected a non-empty string, got {_type_name(path)}")
    return kind, path  # type: ignore[return-value]


def _parse_triggers(value: Any, where: str) -> tuple[Trigger, ...]:
    if not isinstance(value, list):
        raise PolicyError(f"{where}: expected a list of triggers, got {_type_name(value)}")
    seen: list[Trigger] = []
    for i, item in enumerate(value):
        trigger = _choice(item, TRIGGERS, f"{where}[{i}]")
        if trigger not in seen:
            seen.append(trigger)  # type: ignore[arg-type]
    return tuple(seen)


def _parse_retention(value: Any, where: str) -> Retention:
    body = _mapping(value, where, RETENTION_KEYS)
    mode = _choice(body.get("mode", DEFAULT_RETENTION_MODE), RETENTION_MODES, f"{where}.mode")
    n = _positive_int(body["n"], f"{where}.n") if "n" in body else DEFAULT_RETENTION_N
    return Retention(mode, n)  # type: ignore[arg-type]


def parse_policy(
    value: Any,
    *,
    where: str = "spec.checkpoint",
    workspace_storage: StorageKind | None = None,
) -> CheckpointPolicy:
    """Parse and validate a ``spec.checkpoint`` mapping (None = absent = every default).

    ``workspace_storage`` is the store a workspace config enables (CK-7); it applies only when
    the spec omits ``storage``.

    Raises:
        PolicyError: an unknown key, a wrong type or value, or an inconsistent combination;
            the message names the key path.
    """
    if value is None:
        value = {}
    body = _mapping(value, where, POLICY_KEYS)
    mode = _choice(body.get("mode", DEFAULT_MODE), MODES, f"{where}.mode")

    storage: StorageKind | None
    path: str | None = None
    if "storage" in body and body["storage"] is not None:
        storage, path = _parse_storage(body["storage"], f"{where}.storage")
        source: StorageSource = "spec"
    elif workspace_storage is not None:
        storage, source = workspace_storage, "workspace"
    else:
        storage = INFERRED_STORAGE[mode]
        source = "inferred" if storage is not None else "none"

    triggers = _parse_triggers(body["triggers"], f"{where}.triggers") if "triggers" in body else ()
    every_n: int | None = None
    if "every_n_turns" in body and body["every_n_turns"] is not None:
        every_n = _positive_int(body["every_n_turns"], f"{where}.every_n_turns")
    if "every_n_turns" in triggers and every_n is None:
        raise PolicyError(
            f"{where}.every_n_turns: required by the every_n_turns trigger",
            hint="set every_n_turns to a positive integer",
        )
    if triggers and mode == "none":
        raise PolicyError(
            f"{where}.triggers: mode none captures nothing automatically, so triggers have no "
            "effect",
            hint="set mode: on_event (or every_turn) to use triggers",
        )
    if mode == "on_event" and not triggers:
        raise PolicyError(
            f"{where}.triggers: mode on_event needs at least one trigger",
            hint="e.g. triggers: [after_llm_call]",
        )

    retention = (
        _parse_retention(body["retention"], f"{where}.retention")
        if "retention" in body
        else Retention()
    )
    portability_word = _choice(
        body.get("portability", DEFAULT_PORTABILITY),
        tuple(PORTABILITY_ALIASES),
        f"{where}.portability",
    )
    auto = body.get("auto_resume_latest", DEFAULT_AUTO_RESUME)
    if type(auto) is not bool:
        raise PolicyError(f"{where}.auto_resume_latest: expected a boolean, got {_type_name(auto)}")
    if auto and mode == "in_memory":
        raise PolicyError(
            f"{where}.auto_resume_latest: not allowed with mode in_memory (nothing survives "
            "the process)",
            hint="use mode every_turn or on_event with disk or hybrid storage",
        )
    if auto and storage not in ("disk", "hybrid"):
        shown = storage or "none"
        raise PolicyError(
            f"{where}.auto_resume_latest: requires disk or hybrid storage, storage is {shown}",
            hint="set storage: disk (or hybrid)",
        )
    return CheckpointPolicy(
        mode=mode,  # type: ignore[arg-type]
        storage=storage,
        storage_path=path,
        storage_source=source,
        triggers=triggers,
        every_n_turns=every_n,
        retention=retention,
        portability=PORTABILITY_ALIASES[portability_word],
        auto_resume_latest=auto,
    )


def policy_of_manifest(
    manifest: Mapping[str, Any] | None, *, workspace_storage: StorageKind | None = None
) -> CheckpointPolicy:
    """The checkpoint policy of an Agent manifest (defaults when it has none).

    Raises:
        PolicyError: ``spec`` is not a mapping, or ``spec.checkpoint`` is invalid.
    """
    if manifest is None:
        return parse_policy(None, workspace_storage=workspace_storage)
    spec = manifest.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        raise PolicyError(f"spec: expected a mapping, got {_type_name(spec)}")
    return parse_policy(spec.get("checkpoint"), workspace_storage=workspace_storage)


def effective_portability(
    policy: CheckpointPolicy, *, archive_enabled: bool
) -> tuple[Portability, str | None]:
    """AR-2: a reference checkpoint needs the archive; without it fall back to self_contained.

    Returns the portability to use and a one-line notice when it fell back.
    """
    if policy.portability == "reference" and not archive_enabled:
        return "self_contained", (
            "portability reference needs the archive (mas_ctl.archive.enabled is false); "
            "falling back to self_contained"
        )
    return policy.portability, None
