"""Workspace/lab config (CK-7, AR-2) and checkpoint directory resolution (CK-6).

A workspace ``config.yaml`` may enable a checkpoint store through ``plugins:`` or
``lab.enable_plugins`` (``mas.checkpoint_store.hybrid``, …) and the archive through
``mas_ctl.archive.enabled``. The spec's own ``storage`` always wins over the workspace.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from alpstore.errors import PolicyError
from alpstore.policy.model import STORAGE_KINDS, CheckpointPolicy, StorageKind
from alpstore.policy.overlays import UniqueKeyLoader, check_expansion, yaml_problem

WORKSPACE_CONFIG_NAME: Final = "config.yaml"
DEFAULT_CHECKPOINT_SUBDIR: Final = Path(".mas") / "checkpoints"
"""CK-6: where files go when disk persistence is on and no directory is configured."""

STORE_PLUGIN_PREFIXES: Final = ("mas.checkpoint_store.", "alpstore.checkpoint_store.")
MAX_CONFIG_BYTES: Final = 1024 * 1024


@dataclass(frozen=True)
class WorkspaceConfig:
    """What alpstore reads from a workspace/lab ``config.yaml``.

    Fields:
        path: the file read, or None when there was none.
        checkpoint_store: the store a plugin enables (memory, disk, hybrid), or None.
        archive_enabled: ``mas_ctl.archive.enabled`` (default false, AR-2).
        plugins: every plugin name listed, in order.
    """

    path: Path | None = None
    checkpoint_store: StorageKind | None = None
    archive_enabled: bool = False
    plugins: tuple[str, ...] = ()


def _plugin_names(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, Mapping):
        items = list(value)
    elif isinstance(value, list):
        items = value
    else:
        raise PolicyError(f"{where}: expected a list of plugin names")
    names: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise PolicyError(f"{where}[{i}]: expected a plugin name (string)")
        names.append(item)
    return names


def parse_workspace_config(data: Any, *, path: Path | None = None) -> WorkspaceConfig:
    """Interpret a parsed ``config.yaml``.

    Raises:
        PolicyError: the document or one of the keys alpstore reads has the wrong shape, or two
            different checkpoint stores are enabled.
    """
    where = str(path) if path is not None else WORKSPACE_CONFIG_NAME
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise PolicyError(f"{where}: expected a mapping at the top level")
    names = _plugin_names(data.get("plugins"), f"{where}: plugins")
    lab = data.get("lab")
    if lab is not None:
        if not isinstance(lab, Mapping):
            raise PolicyError(f"{where}: lab: expected a mapping")
        names += _plugin_names(lab.get("enable_plugins"), f"{where}: lab.enable_plugins")
    stores: list[StorageKind] = []
    for name in names:
        for prefix in STORE_PLUGIN_PREFIXES:
            if name.startswith(prefix):
                kind = name[len(prefix) :]
                if kind not in STORAGE_KINDS:
                    raise PolicyError(
                        f"{where}: plugin {name!r}: unknown checkpoint store "
                        f"(expected {', '.join(prefix + k for k in STORAGE_KINDS)})"
                    )
                if kind not in stores:
                    stores.append(kind)  # type: ignore[arg-type]
    if len(stores) > 1:
        raise PolicyError(
            f"{where}: plugins enable more than one checkpoint store ({', '.join(stores)})"
        )
    archive_enabled = False
    mas_ctl = data.get("mas_ctl")
    if mas_ctl is not None:
        if not isinstance(mas_ctl, Mapping):
            raise PolicyError(f"{where}: mas_ctl: expected a mapping")
        archive = mas_ctl.get("archive")
        if archive is not None:
            if not isinstance(archive, Mapping):
                raise PolicyError(f"{where}: mas_ctl.archive: expected a mapping")
            enabled = archive.get("enabled", False)
            if type(enabled) is not bool:
                raise PolicyError(f"{where}: mas_ctl.archive.enabled: expected a boolean")
            archive_enabled = enabled
    return WorkspaceConfig(
        path=path,
        checkpoint_store=stores[0] if stores else None,
        archive_enabled=archive_enabled,
        plugins=tuple(names),
    )


def load_workspace_config(path: Path) -> WorkspaceConfig:
    """Read and interpret a workspace ``config.yaml``.

    Raises:
        PolicyError: unreadable, not YAML, too large, or the wrong shape.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read workspace config ({exc.strerror})") from exc
    if len(raw) > MAX_CONFIG_BYTES:
        raise PolicyError(f"{path}: workspace config is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        data = yaml.load(raw, Loader=UniqueKeyLoader)  # a SafeLoader
        check_expansion(data, str(path), len(raw))
    except yaml.YAMLError as exc:
        raise PolicyError(f"{path}: not valid YAML ({yaml_problem(exc)})") from exc
    except RecursionError as exc:
        raise PolicyError(f"{path}: nested too deeply") from exc
    return parse_workspace_config(data, path=path)


def find_workspace_config(manifest_path: Path | None, cwd: Path) -> WorkspaceConfig:
    """The workspace config beside the manifest, else in ``cwd``; an empty one when neither."""
    candidates = []
    if manifest_path is not None:
        candidates.append(manifest_path.parent / WORKSPACE_CONFIG_NAME)
    candidates.append(cwd / WORKSPACE_CONFIG_NAME)
    for candidate in candidates:
        if candidate.is_file():
            return load_workspace_config(candidate)
    return WorkspaceConfig()


def resolve_checkpoint_dir(
    policy: CheckpointPolicy,
    *,
    cli_dir: Path | None,
    manifest_path: Path | None,
    cwd: Path,
    force: bool = False,
) -> Path | None:
    """CK-6: ``--checkpoint-dir``, else ``storage.path``, else ``.mas/checkpoints`` beside the
    active manifest (or in ``cwd``) when disk persistence is on; None when nothing persists.

    A relative ``storage.path`` is taken relative to the manifest's directory (``cwd`` without
    one), like the default. ``force`` resolves a directory even without disk persistence (an
    explicit save is always a file, AR-3).
    """
    if cli_dir is not None:
        return cli_dir
    base = manifest_path.parent if manifest_path is not None else cwd
    if policy.storage_path is not None:
        path = Path(policy.storage_path).expanduser()
        return path if path.is_absolute() else base / path
    if policy.persists_to_disk or force:
        return base / DEFAULT_CHECKPOINT_SUBDIR
    return None
