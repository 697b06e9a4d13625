"""Checkpoint policy: ``spec.checkpoint`` parsing, workspace config, overlays, directories.
May import alpstore.codec, alpstore.canonical and alpstore.errors only: no archive, no store.
"""

from __future__ import annotations

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
