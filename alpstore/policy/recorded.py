"""The policy a session runs under, as it is recorded with the session.

``session open --manifest`` (and ``Store.open_session(manifest=…)``) resolves the checkpoint
policy once — overlays, workspace config, CK-6 directory — and records the result in the
session row (``sessions.origin`` → ``"policy"``), so every later command and process applies
the same policy without the manifest file, and ``session show`` prints it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from alpstore.errors import PolicyError

if TYPE_CHECKING:
    from alpstore.policy.model import CheckpointPolicy

RECORD_KEY: Final = "policy"
"""The key of the recorded policy inside ``sessions.origin``."""
RECORD_VERSION: Final = 1


@dataclass(frozen=True)
class SessionPolicy:
    """A resolved checkpoint policy bound to one session.

    Fields:
        policy: the parsed ``spec.checkpoint`` (storage inferred, aliases resolved).
        checkpoint_dir: the CK-6 directory for deep files, ``checkpoint save`` and
            ``auto_resume_latest`` (absolute), or None when nothing persists to disk and no
            directory was configured.
        manifest_hash: the effective manifest's content hash (what auto-resume matches).
    """

    policy: CheckpointPolicy
    checkpoint_dir: Path | None = None
    manifest_hash: str | None = None

    def as_record(self) -> dict[str, Any]:
        """Plain data for the session row (and for ``session show``)."""
        return {
            "version": RECORD_VERSION,
            **self.policy.as_dict(),
            "checkpoint_dir": str(self.checkpoint_dir) if self.checkpoint_dir else None,
            "manifest_hash": self.manifest_hash,
        }

    def describe(self) -> str:
        """One line for people: mode, triggers, storage, retention, directory."""
        p = self.policy
        parts = [f"mode {p.mode}"]
        if p.triggers:
            trig = ", ".join(
                f"every_n_turns={p.every_n_turns}" if t == "every_n_turns" else t
                for t in p.triggers
            )
            parts.append(f"triggers [{trig}]")
        parts.append(f"storage {p.storage or 'none'}")
        keep = p.retention.keep()
        parts.append("retention all" if keep is None else f"retention keeps {keep}")
        parts.append(f"portability {p.portability}")
        if p.auto_resume_latest:
            parts.append("auto_resume_latest")
        if self.checkpoint_dir is not None:
            parts.append(f"dir {self.checkpoint_dir}")
        return ", ".join(parts)


def _spec_of_record(record: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for key in ("mode", "triggers", "every_n_turns", "retention", "portability"):
        if record.get(key) is not None:
            spec[key] = record[key]
    storage = record.get("storage")
    if storage is not None:
        spec["storage"] = storage if isinstance(storage, str) else dict(storage)
        if isinstance(spec["storage"], dict) and spec["storage"].get("path") is None:
            spec["storage"].pop("path", None)
    spec["auto_resume_latest"] = record.get("auto_resume_latest", False)
    return spec


def session_policy_of_record(record: Any, *, where: str) -> SessionPolicy:
    """Rebuild a :class:`SessionPolicy` from its recorded form, re-validating every field.

    Raises:
        PolicyError: the record is not one this version wrote (names ``where``).
    """
    if not isinstance(record, Mapping) or record.get("version") != RECORD_VERSION:
        raise PolicyError(
            f"{where}: the recorded checkpoint policy is not version {RECORD_VERSION}"
        )
    # loaded here, not at import: `session show` of a session without a policy never parses one
    from alpstore.policy.model import parse_policy

    policy = parse_policy(_spec_of_record(record), where=f"{where}.policy")
    source = record.get("storage_source")
    if source in ("spec", "workspace", "inferred", "none"):
        policy = replace(policy, storage_source=source)
    folder = record.get("checkpoint_dir")
    if folder is not None and (not isinstance(folder, str) or not Path(folder).is_absolute()):
        raise PolicyError(f"{where}.policy.checkpoint_dir: expected an absolute path")
    digest = record.get("manifest_hash")
    if digest is not None and not isinstance(digest, str):
        raise PolicyError(f"{where}.policy.manifest_hash: expected a string")
    return SessionPolicy(policy, Path(folder) if folder else None, digest)


def recorded_policy(origin: Mapping[str, Any] | None, *, where: str) -> SessionPolicy | None:
    """The policy recorded in a session's ``origin``, or None when it has none.

    Raises:
        PolicyError: a record is there but does not validate.
    """
    if not origin or RECORD_KEY not in origin:
        return None
    return session_policy_of_record(origin[RECORD_KEY], where=where)
