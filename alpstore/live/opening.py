"""Opening a live session: a manifest resolved to a policy, bound to a session, and resumed.

With a manifest: overlays, workspace config and the CK-6 directory applied, the policy recorded
with the session (``Store.bind_policy``); ``auto_resume_latest`` resumes the newest file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alpstore.errors import UsageError
from alpstore.live.session import LiveSession
from alpstore.policy import (
    apply_overlays,
    effective_portability,
    find_workspace_config,
    load_manifest,
    load_workspace_config,
    policy_of_manifest,
    resolve_checkpoint_dir,
)
from alpstore.policy.model import CheckpointPolicy
from alpstore.policy.recorded import SessionPolicy, recorded_policy
from alpstore.policy.workspace import WorkspaceConfig
from alpstore.rules.secrets import require_no_secrets
from alpstore.sessions import (
    Retention,
    Session,
)

if TYPE_CHECKING:
    from alpstore.core.store import CoreStore as Store


# ---------------------------------------------------------------------- opening
def resolve_policy(
    manifest: dict[str, Any],
    *,
    manifest_path: Path | None,
    overlays: Sequence[str],
    checkpoint_dir: Path | None,
    workspace_config: Path | None,
    cwd: Path,
) -> tuple[dict[str, Any], SessionPolicy, WorkspaceConfig]:
    """The effective manifest (overlays applied) and the policy it gives, with the CK-6
    directory resolved to an absolute path; plus the workspace config that applied.

    Raises:
        PolicyError: an invalid policy, overlay or workspace config.
        SecretError: the effective manifest holds an inline credential (names the JSON path).
    """
    from alpstore.portable.files import manifest_hash

    effective = apply_overlays(manifest, list(overlays), cwd=cwd)
    where = str(manifest_path) if manifest_path is not None else "manifest"
    require_no_secrets(effective, what=where)
    workspace = (
        load_workspace_config(workspace_config)
        if workspace_config is not None
        else find_workspace_config(manifest_path, cwd)
    )
    policy = policy_of_manifest(effective, workspace_storage=workspace.checkpoint_store)
    folder = resolve_checkpoint_dir(
        policy,
        cli_dir=checkpoint_dir,
        manifest_path=manifest_path.absolute() if manifest_path is not None else None,
        cwd=cwd,
        force=True,
    )
    absolute = (cwd / folder).absolute() if folder is not None else None
    return (
        effective,
        SessionPolicy(policy, absolute, manifest_hash(effective)),
        workspace,
    )


def session_retention(policy: CheckpointPolicy) -> Retention:
    """The archive's retention columns for a policy."""
    return Retention(policy.retention.mode, policy.retention.n)


def open_live_session(
    store: Store,
    session: str | None,
    *,
    manifest: Any | None,
    overlays: Sequence[str] = (),
    checkpoint_dir: Path | None = None,
    workspace_config: Path | None = None,
    name: str | None = None,
    cwd: Path | None = None,
) -> LiveSession:
    """See :meth:`alpstore.store.Store.open_session`."""
    if manifest is None:
        if session is None:
            raise UsageError("open_session needs a session or a manifest")
        found = store.get_session(session)
        return LiveSession(store, found, policy_of_session(found))
    opened = open_with_manifest(
        store,
        manifest,
        overlays=overlays,
        checkpoint_dir=checkpoint_dir,
        workspace_config=workspace_config,
        name=name,
        cwd=cwd or Path.cwd(),
    )
    return opened.live


def policy_of_session(session: Session) -> SessionPolicy | None:
    """The policy recorded with a session (None when it has none).

    Raises:
        PolicyError: the record does not validate.
    """
    return recorded_policy(session.info(refresh=False).origin, where=f"session {session.uuid}")


@dataclass(frozen=True)
class Prepared:
    """A manifest validated and resolved, before anything is stored.

    Fields:
        effective_manifest: the manifest with overlays applied (what the session embeds).
        policy: the resolved policy with its CK-6 directory and manifest hash.
        manifest_path: the manifest file, when it came from one.
        workspace: the workspace config that applied (CK-7, AR-2).
        notice: a one-line notice (e.g. reference portability fell back), or None.
    """

    effective_manifest: dict[str, Any]
    policy: SessionPolicy
    manifest_path: Path | None
    workspace: WorkspaceConfig
    notice: str | None


@dataclass(frozen=True)
class Opened:
    """What opening a session under a manifest did.

    Fields:
        live: the live session.
        resumed_from: the file auto_resume_latest loaded, or None (a new session).
        reason: why nothing was resumed (for people).
        prepared: the validated manifest and policy.
    """

    live: LiveSession
    resumed_from: Path | None
    reason: str
    prepared: Prepared


def prepare_manifest(
    manifest: Any,
    *,
    overlays: Sequence[str] = (),
    checkpoint_dir: Path | None = None,
    workspace_config: Path | None = None,
    cwd: Path,
    path: Path | None = None,
) -> Prepared:
    """Load (from a path) and validate a manifest and its policy; touches no archive.
    ``path`` is where a manifest given as a mapping was read from (its folder is where
    ``storage.path`` and the workspace config are looked up).

    Raises:
        PolicyError, SecretError, UsageError: the manifest cannot be used.
    """
    if isinstance(manifest, str | Path):
        path = Path(manifest)
        manifest = load_manifest(path)
    if not isinstance(manifest, dict):
        raise UsageError("a manifest must be a mapping (or the path of a YAML/JSON file)")
    effective, bound, workspace = resolve_policy(
        manifest,
        manifest_path=path,
        overlays=overlays,
        checkpoint_dir=checkpoint_dir,
        workspace_config=workspace_config,
        cwd=cwd,
    )
    portability, notice = effective_portability(
        bound.policy, archive_enabled=workspace.archive_enabled
    )
    if portability != bound.policy.portability:
        bound = replace(bound, policy=replace(bound.policy, portability=portability))
    return Prepared(effective, bound, path, workspace, notice)


def open_prepared(
    store: Store,
    prepared: Prepared,
    *,
    name: str | None = None,
    session_id: str | None = None,
    resume: bool = True,
) -> Opened:
    """Resume the newest matching file (auto_resume_latest, unless ``resume`` is False) or
    create a session (``session_id``, ``name``), and record the policy with it.
    """
    from alpstore.portable.importing import import_file
    from alpstore.portable.resume import select_latest

    bound = prepared.policy
    policy = bound.policy
    resumed_from: Path | None = None
    reason = "auto_resume_latest is off"
    session: Session | None = None
    folder = bound.checkpoint_dir
    if not resume:
        reason = "a new session was asked for"
    elif policy.auto_resume_latest and folder is not None:
        assert bound.manifest_hash is not None
        selection = select_latest(folder, bound.manifest_hash)
        if selection.chosen is not None:
            chosen = selection.chosen.path
            result = import_file(store, chosen, manifest_hash=bound.manifest_hash)  # streamed
            if result.existing:
                result.session.resume(result.checkpoint)
            session, resumed_from = result.session, chosen
        else:
            reason = (
                f"no version 2 checkpoint in {folder} matches manifest "
                f"{bound.manifest_hash[:12]}… ({selection.considered} file(s) examined)"
            )
    if session is None:
        session = store.create_session(
            session_id=session_id,
            name=name,
            manifest=prepared.effective_manifest,
            retention=session_retention(policy),
        )
    store.bind_policy(session.id, bound.as_record(), session_retention(policy))
    session.info()
    return Opened(LiveSession(store, session, bound), resumed_from, reason, prepared)


def open_with_manifest(
    store: Store,
    manifest: Any,
    *,
    overlays: Sequence[str] = (),
    checkpoint_dir: Path | None = None,
    workspace_config: Path | None = None,
    name: str | None = None,
    cwd: Path,
) -> Opened:
    """Open a session under a manifest: validate everything first (nothing is stored when the
    policy is invalid or the manifest holds a credential), then :func:`open_prepared`.
    """
    prepared = prepare_manifest(
        manifest,
        overlays=overlays,
        checkpoint_dir=checkpoint_dir,
        workspace_config=workspace_config,
        cwd=cwd,
    )
    return open_prepared(store, prepared, name=name)
