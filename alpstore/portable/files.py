"""mas-lab session checkpoint files, version 1 and 2: hash, validate, name, read and write.

A file is checked against the shipped upstream schema (``checkpoint.schema.yaml``); a version 2
file's ``manifest.content_hash`` must be the SHA-256 of its manifest as UTF-8 JSON with keys
sorted, separators ``,`` ``:`` and non-ASCII unescaped. Reads are bounded (size checked before
parsing, ``.zst`` decompression capped); writes are scanned for secrets, validated, and atomic.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import zstandard

from alpstore import fileio
from alpstore.codec import (
    MAX_DEPTH,
    MAX_RAW_SIZE,
    canonical_json,
    canonical_json_parsed,
    decompress_file_bytes,
    nesting_depth,
    parse_json,
)
from alpstore.errors import (
    CanonicalJSONError,
    CheckpointFileError,
    IntegrityError,
    NestedTooDeepError,
    NotFoundError,
)
from alpstore.portable.deep_shape import certainly_valid
from alpstore.portable.targets import refuse_database_target
from alpstore.portable.travel_header import ZST_SUFFIX as ZST_SUFFIX
from alpstore.portable.travel_header import is_compressed as is_compressed
from alpstore.rules.secrets import require_no_secrets, scan

if TYPE_CHECKING:
    import jsonschema

MAX_CHECKPOINT_BYTES: Final = 128 * 1024 * 1024
"""Largest checkpoint file (and largest decompressed ``.zst``) read whole into memory (``show``,
``fork``, the auto-resume scan). Import and export stream, under :data:`MAX_DOCUMENT_BYTES`."""
MAX_DOCUMENT_BYTES: Final = 4 * 1024 * 1024 * 1024
"""Largest deep file (decompressed JSON text) an export writes and an import reads: the same
limit on both sides, so what export writes, import reads. Both stream: memory stays bounded by
the largest single message."""
MAX_MESSAGE_BYTES: Final = MAX_RAW_SIZE
"""Largest single message (canonical JSON bytes): the archive's bound on one blob."""
MAX_INT: Final = 2**31 - 1
"""Largest ``turn``, ``backtrack_count`` and ``spec_revision`` (the archive's integer columns)."""
JSON_SUFFIX: Final = ".json"
ZST_LEVEL: Final = 3


def check_depth(value: Any, where: str) -> None:
    """Refuse content nested deeper than :data:`MAX_DEPTH`.

    Raises:
        CheckpointFileError: naming ``where``.
    """
    if nesting_depth(value) > MAX_DEPTH:
        raise CheckpointFileError(
            f"{where}: nested deeper than {MAX_DEPTH} levels; refused",
            hint="deep files carry content at most 256 levels deep, on export and on import",
        )


def canonical_bytes(value: Any, where: str, *, parsed: bool = False) -> bytes:
    """The canonical JSON of one message or state document, within the file limits.

    The depth is checked on the canonical text first (counting brackets runs at C speed); only
    a value with more than :data:`MAX_DEPTH` brackets is walked. ``parsed``: the value came
    from ``json`` (its keys are strings), so their walk is skipped.

    Raises:
        CheckpointFileError: too deep, or larger than :data:`MAX_MESSAGE_BYTES`.
        CanonicalJSONError: not canonical JSON (NaN, a lone surrogate …), naming the path.
    """
    try:  # (both check the depth: NestedTooDeepError)
        raw = canonical_json_parsed(value) if parsed else canonical_json(value)
    except (RecursionError, NestedTooDeepError):
        raw = None
    if raw is None:
        raise CheckpointFileError(
            f"{where}: nested deeper than {MAX_DEPTH} levels; refused",
            hint="deep files carry content at most 256 levels deep, on export and on import",
        )
    if len(raw) > MAX_MESSAGE_BYTES:
        raise CheckpointFileError(
            f"{where}: {len(raw)} bytes is larger than the {MAX_MESSAGE_BYTES}-byte limit of "
            "one message; refused"
        )
    return raw


def empty_kernel() -> dict[str, Any]:
    """The kernel snapshot written when the runtime gave none (the schema requires q and run)."""
    return {"q": {}, "run": {}}


_SAFE_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+=-]*$")


def manifest_hash(content: Any) -> str:
    """SHA-256 hex of a manifest: UTF-8 JSON, keys sorted, ``,``/``:``, non-ASCII unescaped."""
    import hashlib  # (on first use: OpenSSL's module is 3-6 ms of every export's imports)

    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def now_iso() -> str:
    """The current time in ISO 8601 with a UTC offset (``lineage.created_at``)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def iso_from_timestamp(ts: float) -> str:
    """A POSIX timestamp in ISO 8601 with a UTC offset."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def _load_yaml(text: str) -> Any:
    """``text`` parsed with libyaml's safe loader when PyYAML was built with it (the schema
    loads in 5 ms, not 70). PyYAML is imported here, on first use: an export that validates
    its document by hand (``deep_shape``) or a session file's import never loads it.
    """
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@cache
def checkpoint_schema() -> dict[str, Any]:
    """The upstream ``checkpoint.schema.yaml`` shipped with the package."""
    import importlib.resources  # (on first use, as PyYAML: ~2 ms)

    text = importlib.resources.files("alpstore").joinpath("schemas/checkpoint.schema.yaml")
    data: dict[str, Any] = _load_yaml(text.read_text(encoding="utf-8"))
    return data


@cache
def agent_schema() -> dict[str, Any]:
    """The shipped ``agent.schema.yaml`` (the Agent manifest's ``spec.checkpoint`` policy)."""
    import importlib.resources

    text = importlib.resources.files("alpstore").joinpath("schemas/agent.schema.yaml")
    data: dict[str, Any] = _load_yaml(text.read_text(encoding="utf-8"))
    return data


def _is_datetime(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if "T" not in value.upper():
        raise ValueError(f"{value!r} is not an ISO 8601 date-time")
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError(f"{value!r} has no UTC offset")
    return True


@cache
def _formats() -> jsonschema.FormatChecker:
    """The format checker (jsonschema, about 70 ms of imports, is loaded on first use only:
    an export or an import that validates no checkpoint document never pays for it).
    """
    import jsonschema

    formats = jsonschema.FormatChecker()
    formats.checks("date-time", raises=ValueError)(_is_datetime)
    return formats


@cache
def _validator() -> jsonschema.Draft7Validator:
    import jsonschema

    return jsonschema.Draft7Validator(checkpoint_schema(), format_checker=_formats())


def _error_path(err: jsonschema.ValidationError) -> str:
    return err.json_path


def _message(err: jsonschema.ValidationError) -> str:
    # jsonschema quotes the offending value; keep it short (it may be large or sensitive).
    if err.validator in ("type", "const", "enum", "pattern", "format", "minLength", "minimum"):
        return f"{err.validator} {_short(err.validator_value)} not satisfied"
    if scan(err.instance):  # jsonschema's own text repeats the value
        return f"{err.validator} not satisfied (the value looks like a secret; not shown)"
    return err.message if len(err.message) <= 200 else err.message[:199] + "…"


_BULK_KEYS: Final = ("committed_messages", "working_messages")


def _skeleton(doc: Any) -> tuple[Any, list[str]]:
    """The document with each agent's message arrays emptied, and their own check.

    The schema asks only that each message is an object; checking that directly keeps
    validation of a 10,000-message file cheap.
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("working_memory"), list):
        return doc, []
    errors: list[str] = []
    agents: list[Any] = []
    for i, agent in enumerate(doc["working_memory"]):
        if isinstance(agent, dict):
            agent = dict(agent)
            for key in _BULK_KEYS:
                items = agent.get(key)
                if isinstance(items, list):
                    errors.extend(
                        f"$.working_memory[{i}].{key}[{j}]: type 'object' not satisfied"
                        for j, item in enumerate(items)
                        if not isinstance(item, dict)
                    )
                    agent[key] = []
        agents.append(agent)
    return {**doc, "working_memory": agents}, errors


def schema_errors(doc: Any) -> list[str]:
    """Schema violations of a checkpoint document, each ``<json path>: <reason>``.

    The schema is a ``oneOf`` of version 1 and 2; errors are reported against the branch the
    document's ``version`` selects, so they name the real key.
    """
    doc, bulk_errors = _skeleton(doc)
    if certainly_valid(doc, _is_datetime):  # the common case, without jsonschema (issue 41)
        return bulk_errors
    validator = _validator()
    errors = list(validator.iter_errors(doc))
    if not errors:
        return bulk_errors
    version = doc.get("version") if isinstance(doc, dict) else None
    branches = checkpoint_schema()["oneOf"]
    if version in (1, 2) and type(version) is int:
        branch = dict(branches[version - 1])
        branch["definitions"] = checkpoint_schema()["definitions"]
        import jsonschema

        sub = jsonschema.Draft7Validator(branch, format_checker=_formats())
        found = sorted(sub.iter_errors(doc), key=lambda e: list(e.absolute_path))
        if found:
            return [f"{_error_path(e)}: {_message(e)}" for e in found] + bulk_errors
    if not isinstance(doc, dict):
        return ["$: a checkpoint must be a JSON object"]
    return [f"$.version: expected 1 or 2, got {_short(version)}"]


def _short(value: Any, limit: int = 60) -> str:
    if scan(value):  # an error message never repeats a credential
        return "<a value that looks like a secret>"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_text_values(doc: Any, where: str, *, messages: bool = False) -> None:
    r"""Refuse a document whose parts other than its message arrays (with ``messages``, whose
    every part) hold what no UTF-8 text can: a lone surrogate (JSON lets a file spell one,
    ``"\ud800"``). The manifest's hash, the archive's canonical JSON and every writer would
    fail on it later.

    Raises:
        CheckpointFileError: naming the JSON path.
    """
    if not isinstance(doc, dict):
        return
    for key, value in (doc if messages else _skeleton(doc)[0]).items():
        try:
            canonical_json(value)
        except CanonicalJSONError as exc:
            raise CheckpointFileError(f"{where}: $.{key}: {exc.message}") from exc
        except RecursionError:
            raise CheckpointFileError(f"{where}: $.{key}: nested too deeply") from None


def validate_document(doc: Any, *, where: str, check_hash: bool = True) -> dict[str, Any]:
    """Check a checkpoint document against the schema and (version 2) its manifest hash.

    Raises:
        CheckpointFileError: schema violations (first few listed), a manifest hash mismatch, or
            a lone surrogate outside the message arrays (:func:`check_text_values`).
    """
    check_text_values(doc, where)
    problems = schema_errors(doc)
    if problems:
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        raise CheckpointFileError(f"{where}: schema: {'; '.join(problems[:3])}{more}")
    assert isinstance(doc, dict)
    if check_hash and doc["version"] == 2:
        expected = manifest_hash(doc["manifest"]["content"])
        if doc["manifest"]["content_hash"] != expected:
            raise CheckpointFileError(
                f"{where}: $.manifest.content_hash does not match the embedded manifest "
                f"(recorded {doc['manifest']['content_hash'][:12]}…, computed {expected[:12]}…)",
                hint="the manifest was edited after the checkpoint was written",
            )
    return doc


def read_document(path: Path, *, max_bytes: int = MAX_CHECKPOINT_BYTES) -> dict[str, Any]:
    """Read a checkpoint file's JSON (``.json`` or ``.json.zst``) without schema validation.

    The size is checked before reading; decompression stops at ``max_bytes``.

    Raises:
        NotFoundError: no such file.
        CheckpointFileError: too large, not zstd, a decompression bomb, not JSON, not an object,
            or a value no canonical JSON holds (a lone surrogate, a number beyond a float).
    """
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise NotFoundError(f"{path}: no such checkpoint file") from None
    except OSError as exc:
        raise CheckpointFileError(f"{path}: cannot read ({exc.strerror})") from exc
    if not path.is_file():
        raise CheckpointFileError(f"{path}: not a regular file")
    if size > max_bytes:
        raise CheckpointFileError(
            f"{path}: {size} bytes is larger than the {max_bytes}-byte limit; refused"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointFileError(f"{path}: cannot read ({exc.strerror})") from exc
    if is_compressed(path):
        try:
            data = decompress_file_bytes(data, limit=max_bytes, what=str(path))
        except IntegrityError as exc:
            raise CheckpointFileError(exc.message) from exc
    try:
        doc = parse_json(data, where=str(path))
    except CanonicalJSONError as exc:
        raise CheckpointFileError(exc.message) from exc
    if not isinstance(doc, dict):
        raise CheckpointFileError(f"{path}: a checkpoint file must hold a JSON object")
    try:
        canonical_json(doc)  # every message too: a lone surrogate ("\\ud800") is no text
    except CanonicalJSONError as exc:
        raise CheckpointFileError(f"{path}: {exc.message}") from exc
    except RecursionError:
        raise CheckpointFileError(f"{path}: not valid JSON (nested too deeply)") from None
    return doc


def load_checkpoint_file(
    path: Path, *, max_bytes: int = MAX_CHECKPOINT_BYTES, check_hash: bool = True
) -> dict[str, Any]:
    """Read and validate a checkpoint file (schema, and manifest hash for version 2).

    Raises:
        NotFoundError, CheckpointFileError: see :func:`read_document` and
            :func:`validate_document`.
    """
    doc = read_document(path, max_bytes=max_bytes)
    return validate_document(doc, where=str(path), check_hash=check_hash)


def check_name_part(value: str, what: str) -> str:
    """Refuse a session id or label that cannot be part of a file name inside one directory.

    Raises:
        CheckpointFileError: empty, a path separator, ``..``, a leading dot or an odd character.
    """
    if not _SAFE_NAME.match(value) or ".." in value:
        raise CheckpointFileError(
            f"{what} {value!r} cannot be used in a file name (it would escape or hide in the "
            "directory)",
            hint="use letters, digits and . _ - @ + = only",
        )
    return value


def checkpoint_file_name(session_id: str, label: str, *, compress: bool = False) -> str:
    """``<session_id>-<label>.json`` (mas-lab naming), ``.json.zst`` when compressed."""
    check_name_part(session_id, "session id")
    check_name_part(label, "label")
    return f"{session_id}-{label}{JSON_SUFFIX}{ZST_SUFFIX if compress else ''}"


def contained_path(directory: Path, name: str) -> Path:
    """``directory / name``, refusing a name that escapes the directory.

    Raises:
        CheckpointFileError: the resolved path is outside ``directory``.
    """
    base = directory.resolve()
    target = (base / name).resolve()
    if target.parent != base:
        raise CheckpointFileError(f"{name!r}: the path escapes the output directory {directory}")
    return target


PRETTY_MAX_MESSAGES: Final = 1000
"""Files with up to this many messages are pretty-printed (2 spaces) like mas-lab's; larger
ones are written compact, since Python's pretty printer is several times slower."""


def _message_count(doc: dict[str, Any]) -> int:
    total = 0
    for agent in doc.get("working_memory") or []:
        if isinstance(agent, dict):
            for key in _BULK_KEYS:
                items = agent.get(key)
                total += len(items) if isinstance(items, list) else 0
    return total


def document_text(doc: dict[str, Any]) -> str:
    """The text of a checkpoint file plus a newline: pretty (2 spaces) unless it is large."""
    indent = 2 if _message_count(doc) <= PRETTY_MAX_MESSAGES else None
    return json.dumps(doc, indent=indent, ensure_ascii=False) + "\n"


def encode_document(
    doc: dict[str, Any], *, compress: bool = False, text: str | None = None
) -> bytes:
    """The bytes of a checkpoint file (``text`` when already serialised), zstd when asked."""
    data = (text if text is not None else document_text(doc)).encode("utf-8")
    if compress:
        data = zstandard.ZstdCompressor(level=ZST_LEVEL, write_content_size=True).compress(data)
    return data


def atomic_write(path: Path, data: bytes, *, overwrite: bool = True) -> None:
    """Write ``data`` to ``path`` atomically (``alpstore.fileio.atomic_write``); a new file is
    private (0600: a checkpoint holds a conversation).

    Raises:
        CheckpointFileError: ``path`` exists and ``overwrite`` is false.
        StorageError: the file system refused the write.
    """
    if not overwrite and path.exists():
        raise CheckpointFileError(f"{path}: already exists; refusing to overwrite")
    refuse_database_target(path)
    fileio.refuse_symlink(path)  # a planted link would carry the conversation elsewhere
    fileio.atomic_write(path, data, mode=None if path.exists() else 0o600)


def check_for_secrets(doc: dict[str, Any], *, what: str, json_text: str | None = None) -> None:
    """CK-11: scan kernel, working memory, manifest (and every other part) of a document.

    Raises:
        SecretError: an inline secret; the message names JSON paths only.
    """
    if json_text is None:
        json_text = json.dumps(doc, ensure_ascii=False)
    require_no_secrets(doc, what=what, json_text=json_text)


def write_checkpoint_file(
    doc: dict[str, Any],
    path: Path,
    *,
    compress: bool | None = None,
    overwrite: bool = True,
) -> Path:
    """Scan for secrets, validate, then atomically write a checkpoint document to ``path``.

    ``compress`` defaults to the file name (``.zst``). Nothing is written when a check fails.

    Raises:
        SecretError, CheckpointFileError, StorageError.
    """
    text = document_text(doc)
    check_for_secrets(doc, what=str(path), json_text=text)
    validate_document(doc, where=str(path))
    if compress is None:
        compress = is_compressed(path)
    atomic_write(path, encode_document(doc, compress=compress, text=text), overwrite=overwrite)
    return path


def build_v1(
    kernel: dict[str, Any] | None,
    *,
    label: str | None = None,
    turn: int | None = None,
) -> dict[str, Any]:
    """A version 1 (kernel-only) document."""
    doc: dict[str, Any] = {"version": 1, "kernel": kernel if kernel is not None else empty_kernel()}
    if label is not None:
        doc["label"] = label
    if turn is not None:
        doc["turn"] = turn
    return doc


def build_v2(
    *,
    session_id: str,
    label: str,
    turn: int,
    kernel: dict[str, Any] | None,
    working_memory: list[dict[str, Any]],
    manifest: dict[str, Any],
    parent_session_id: str | None = None,
    forked_from_checkpoint: str | None = None,
    root_session_id: str | None = None,
    created_at: str | None = None,
    backtrack_count: int | None = None,
) -> dict[str, Any]:
    """A version 2 document; ``root_session_id`` defaults to the parent's id, else our own."""
    doc: dict[str, Any] = {
        "version": 2,
        "label": label,
        "turn": turn,
        "lineage": {
            "session_id": session_id,
            "parent_session_id": parent_session_id,
            "forked_from_checkpoint": forked_from_checkpoint,
            "root_session_id": root_session_id or parent_session_id or session_id,
            "created_at": created_at or now_iso(),
        },
        "kernel": kernel if kernel is not None else empty_kernel(),
        "working_memory": working_memory,
        "manifest": {"content": manifest, "content_hash": manifest_hash(manifest)},
    }
    if backtrack_count:
        doc["backtrack_count"] = backtrack_count
    return doc


def fork_document(doc: dict[str, Any], *, source_name: str, session_id: str) -> dict[str, Any]:
    """A version 2 document forked into a new session: new id, parent and source recorded.

    The history (working memory, kernel, manifest) is copied; the backtrack count restarts.

    Raises:
        CheckpointFileError: the document is not version 2.
    """
    if doc.get("version") != 2:
        raise CheckpointFileError(
            f"{source_name}: fork needs a version 2 checkpoint, this is version "
            f"{doc.get('version')}",
            hint="version 1 files are kernel-only; resume them with --manifest",
        )
    lineage = doc["lineage"]
    out = {k: v for k, v in doc.items() if k not in ("lineage", "backtrack_count")}
    out["lineage"] = {
        "session_id": session_id,
        "parent_session_id": lineage["session_id"],
        "forked_from_checkpoint": source_name,
        "root_session_id": lineage.get("root_session_id") or lineage["session_id"],
        "created_at": now_iso(),
    }
    ordered: dict[str, Any] = {
        k: out[k] for k in ("version", "label", "turn", "lineage") if k in out
    }
    ordered.update({k: v for k, v in out.items() if k not in ordered})
    return ordered


def list_checkpoint_files(directory: Path) -> list[Path]:
    """The checkpoint files (``*.json``, ``*.json.zst``) of a directory, by name.

    Raises:
        NotFoundError: the directory does not exist.
    """
    if not directory.is_dir():
        raise NotFoundError(f"{directory}: no such checkpoint directory")
    return sorted(
        p
        for p in directory.iterdir()
        if p.is_file()
        and not p.name.startswith(".")
        and (p.name.endswith(JSON_SUFFIX) or p.name.endswith(JSON_SUFFIX + ZST_SUFFIX))
    )
