"""Agent manifests and overlays: load a manifest (YAML or JSON) and apply overlays as patches.

An overlay (``kind: Overlay``) carries ``spec.target.kind`` and ``spec.patch``; the patch is merged
into the manifest's ``spec`` (CK-10): mappings merge recursively, scalars and lists replace, a
``null`` removes the key, and ``{$op: {add: [...]}}`` appends items to a list. Overlays are named
``openclaw`` (bundled), given as a file path, or as ``pkg://<package>/<path>``.
"""

from __future__ import annotations

import copy
import importlib.resources
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, Final

import yaml

from alpstore.errors import PolicyError

MAX_MANIFEST_BYTES: Final = 4 * 1024 * 1024
BUNDLED_PACKAGE: Final = "alpstore"
BUNDLED_OVERLAYS: Final = {"openclaw": "overlays/openclaw.yaml"}
"""Overlays shipped with alpstore, by short name."""
UPSTREAM_PACKAGES: Final = ("mas.library.standard",)
"""mas-lab packages whose overlays alpstore bundles: their ``pkg://`` names resolve to ours."""
PKG_SCHEME: Final = "pkg://"
OP_KEY: Final = "$op"
OVERLAY_KEYS: Final = ("apiVersion", "kind", "metadata", "spec")


def yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's complaint in one line, with where it was found (its own text spans lines)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark else problem


def check_expansion(data: Any, where: str, size: int) -> None:
    """Refuse a parsed YAML document that its aliases expand far beyond its ``size`` in bytes.

    Without aliases a document holds fewer values than it has bytes; a few kilobytes of nested
    aliases (a "billion laughs") would otherwise expand to billions of values later.

    Raises:
        PolicyError: the document expands to more than twice its size in values.
    """
    limit, count, stack = 2 * size + 1000, 0, [data]
    while stack:
        item = stack.pop()
        count += 1
        if count > limit:
            raise PolicyError(f"{where}: YAML aliases expand it beyond {limit} values; refused")
        if isinstance(item, Mapping):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, but a key written twice in one mapping is an error.

    YAML requires unique keys; PyYAML keeps the last one silently, so of ``mode: every_turn``
    and a later ``mode: none`` the second ran without a word. A merge key (``<<``) is not a
    repeat: the mapping's own keys override what it merges, as YAML says.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """The mapping of ``node``, refusing a key its own entries repeat."""
        seen: set[Any] = set()
        for key_node, _value in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                repeated = key in seen
            except TypeError:  # an unhashable key: the base class says so
                continue
            if repeated:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found the key {key!r} more than once",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _parse_document(raw: bytes, where: str) -> Any:
    if len(raw) > MAX_MANIFEST_BYTES:
        raise PolicyError(f"{where}: larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        text = raw.decode("utf-8-sig")  # a byte order mark is fine
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{where}: not UTF-8 text") from exc
    from alpstore.codec import MAX_DEPTH, nesting_depth, parse_json
    from alpstore.errors import CanonicalJSONError

    try:
        if where.endswith(".json"):
            try:
                data = parse_json(text, where=where)  # the one reader: a repeated key refused
            except CanonicalJSONError as exc:
                raise PolicyError(exc.message) from exc
        else:
            try:
                data = yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader
            except yaml.YAMLError as exc:
                raise PolicyError(f"{where}: not valid YAML ({yaml_problem(exc)})") from exc
            check_expansion(data, where, len(raw))
    except RecursionError as exc:
        raise PolicyError(f"{where}: nested too deeply (at most {MAX_DEPTH} levels)") from exc
    if nesting_depth(data) > MAX_DEPTH:
        raise PolicyError(f"{where}: nested too deeply (at most {MAX_DEPTH} levels)")
    return data


def parse_manifest(data: Any, *, where: str) -> dict[str, Any]:
    """Check that a parsed document is an Agent manifest (a mapping, ``kind: Agent`` if given).

    Raises:
        PolicyError: not a mapping, another kind, or ``spec`` not a mapping.
    """
    if not isinstance(data, Mapping):
        raise PolicyError(f"{where}: an Agent manifest must be a mapping")
    kind = data.get("kind", "Agent")
    if kind != "Agent":
        raise PolicyError(f"{where}: kind: expected Agent, got {kind!r}")
    spec = data.get("spec")
    if spec is not None and not isinstance(spec, Mapping):
        raise PolicyError(f"{where}: spec: expected a mapping")
    return dict(data)


def load_manifest(path: Path) -> dict[str, Any]:
    """Read an Agent manifest from a YAML or JSON file.

    Raises:
        PolicyError: unreadable, not YAML/JSON, too large, or not an Agent manifest.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read manifest ({exc.strerror})") from exc
    return parse_manifest(_parse_document(raw, str(path)), where=str(path))


def _read_package_file(package: str, rel: str, ref: str) -> bytes:
    parts = PurePosixPath(rel).parts
    if not parts or any(p in ("..", "") for p in parts) or rel.startswith("/"):
        raise PolicyError(f"{ref}: the path inside the package must be relative and stay inside it")
    try:
        root = importlib.resources.files(package)
    except ModuleNotFoundError:
        if package in UPSTREAM_PACKAGES and rel in BUNDLED_OVERLAYS.values():
            return _read_package_file(BUNDLED_PACKAGE, rel, ref)
        raise PolicyError(f"{ref}: package {package!r} is not installed") from None
    node = root
    for part in parts:
        node = node.joinpath(part)
    if not node.is_file():
        if package in UPSTREAM_PACKAGES and rel in BUNDLED_OVERLAYS.values():
            return _read_package_file(BUNDLED_PACKAGE, rel, ref)
        raise PolicyError(f"{ref}: no such file in package {package!r}")
    return node.read_bytes()


def read_overlay_source(ref: str, *, cwd: Path | None = None) -> tuple[bytes, str]:
    """Fetch an overlay's bytes: a bundled name, ``pkg://package/path`` or a file path.

    Returns the bytes and a display name (ending like the file, so JSON is parsed as JSON).

    Raises:
        PolicyError: unknown name, missing package or file, or a path escaping its package.
    """
    if ref in BUNDLED_OVERLAYS:
        rel = BUNDLED_OVERLAYS[ref]
        return _read_package_file(BUNDLED_PACKAGE, rel, ref), f"{PKG_SCHEME}alpstore/{rel}"
    if ref.startswith(PKG_SCHEME):
        rest = ref[len(PKG_SCHEME) :]
        package, _, rel = rest.partition("/")
        if not package or not rel:
            raise PolicyError(f"{ref}: expected pkg://<package>/<path>")
        return _read_package_file(package, rel, ref), ref
    path = Path(ref).expanduser()
    if cwd is not None and not path.is_absolute():
        path = cwd / path
    if not path.is_file():
        names = ", ".join(sorted(BUNDLED_OVERLAYS))
        raise PolicyError(
            f"overlay {ref!r}: no such file", hint=f"bundled overlays: {names}; or pkg://…"
        )
    try:
        return path.read_bytes(), str(path)
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read overlay ({exc.strerror})") from exc


def load_overlay(ref: str, *, cwd: Path | None = None) -> dict[str, Any]:
    """Read and check an overlay document.

    Raises:
        PolicyError: unreadable, not an Overlay, or without ``spec.patch``.
    """
    raw, where = read_overlay_source(ref, cwd=cwd)
    data = _parse_document(raw, where)
    if not isinstance(data, Mapping):
        raise PolicyError(f"{where}: an overlay must be a mapping")
    if data.get("kind") != "Overlay":
        raise PolicyError(f"{where}: kind: expected Overlay, got {data.get('kind')!r}")
    spec = data.get("spec")
    if not isinstance(spec, Mapping):
        raise PolicyError(f"{where}: spec: expected a mapping")
    patch = spec.get("patch")
    if not isinstance(patch, Mapping):
        raise PolicyError(f"{where}: spec.patch: expected a mapping")
    target = spec.get("target")
    if target is not None and not isinstance(target, Mapping):
        raise PolicyError(f"{where}: spec.target: expected a mapping")
    out = dict(data)
    out["_source"] = where
    return out


def _apply_op(base: Any, op: Any, where: str) -> Any:
    if not isinstance(op, Mapping) or not op:
        raise PolicyError(f"{where}.{OP_KEY}: expected a mapping such as {{add: [...]}}")
    result = base
    for name, arg in op.items():
        if name != "add":
            raise PolicyError(f"{where}.{OP_KEY}.{name}: unknown list operation (expected add)")
        if not isinstance(arg, list):
            raise PolicyError(f"{where}.{OP_KEY}.add: expected a list of items to add")
        if result is None:
            result = []
        if not isinstance(result, list):
            raise PolicyError(f"{where}: {OP_KEY}.add needs a list here, found a mapping or value")
        result = [*result, *copy.deepcopy(arg)]
    return result


def merge_patch(base: Any, patch: Any, where: str) -> Any:
    """Merge ``patch`` into ``base`` (neither is modified); see the module docstring.

    Raises:
        PolicyError: an unknown ``$op`` or an ``add`` onto something that is not a list.
    """
    if isinstance(patch, Mapping):
        if OP_KEY in patch:
            if len(patch) != 1:
                raise PolicyError(f"{where}: {OP_KEY} must be the only key of its mapping")
            return _apply_op(base, patch[OP_KEY], where)
        out: dict[str, Any] = dict(base) if isinstance(base, Mapping) else {}
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = merge_patch(out.get(key), value, f"{where}.{key}")
        return out
    return copy.deepcopy(patch)


def apply_overlay(manifest: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """Return the manifest with the overlay's patch merged into its ``spec``.

    Raises:
        PolicyError: the overlay targets another kind, or its patch cannot apply.
    """
    where = str(overlay.get("_source", "overlay"))
    spec = overlay["spec"]
    target = spec.get("target") or {}
    kind = target.get("kind", "Agent")
    if kind != manifest.get("kind", "Agent"):
        raise PolicyError(f"{where}: spec.target.kind {kind!r} does not match the manifest")
    out = copy.deepcopy(dict(manifest))
    out["spec"] = merge_patch(out.get("spec") or {}, spec["patch"], "spec")
    return out


def apply_overlays(
    manifest: Mapping[str, Any], refs: list[str], *, cwd: Path | None = None
) -> dict[str, Any]:
    """Apply overlays in order (later ones patch the result of earlier ones)."""
    out = copy.deepcopy(dict(manifest))
    for ref in refs:
        out = apply_overlay(out, load_overlay(ref, cwd=cwd))
    return out
