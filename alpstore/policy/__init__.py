"""Checkpoint policy: ``spec.checkpoint`` parsing, workspace config, overlays, directories.
May import alpstore.codec, alpstore.canonical and alpstore.errors only: no archive, no store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from alpstore.policy.model import (
        CheckpointPolicy,
        Retention,
        effective_portability,
        parse_policy,
        policy_of_manifest,
    )
    from alpstore.policy.overlays import (
        apply_overlay,
        apply_overlays,
        load_manifest,
        load_overlay,
        merge_patch,
        parse_manifest,
    )
    from alpstore.policy.workspace import (
        WorkspaceConfig,
        find_workspace_config,
        load_workspace_config,
        parse_workspace_config,
        resolve_checkpoint_dir,
    )

_HOMES: dict[str, str] = {
    "CheckpointPolicy": "alpstore.policy.model",
    "Retention": "alpstore.policy.model",
    "WorkspaceConfig": "alpstore.policy.workspace",
    "apply_overlay": "alpstore.policy.overlays",
    "apply_overlays": "alpstore.policy.overlays",
    "effective_portability": "alpstore.policy.model",
    "find_workspace_config": "alpstore.policy.workspace",
    "load_manifest": "alpstore.policy.overlays",
    "load_overlay": "alpstore.policy.overlays",
    "load_workspace_config": "alpstore.policy.workspace",
    "merge_patch": "alpstore.policy.overlays",
    "parse_manifest": "alpstore.policy.overlays",
    "parse_policy": "alpstore.policy.model",
    "parse_workspace_config": "alpstore.policy.workspace",
    "policy_of_manifest": "alpstore.policy.model",
    "resolve_checkpoint_dir": "alpstore.policy.workspace",
}
"""Where each name lives: loaded on first use (PEP 562), so that reading a recorded policy
(``alpstore.policy.recorded``) does not load YAML, overlays and workspace configs."""

__all__ = [
    "CheckpointPolicy",
    "Retention",
    "WorkspaceConfig",
    "apply_overlay",
    "apply_overlays",
    "effective_portability",
    "find_workspace_config",
    "load_manifest",
    "load_overlay",
    "load_workspace_config",
    "merge_patch",
    "parse_manifest",
    "parse_policy",
    "parse_workspace_config",
    "policy_of_manifest",
    "resolve_checkpoint_dir",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
