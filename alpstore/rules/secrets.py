"""No inline secrets in a checkpoint (CK-11): find credentials before anything is written.

Three kinds of finding: a string shaped like a well-known token (AWS, GitHub, OpenAI, Anthropic,
Slack, Google, Stripe, JWT), a private key block, and a secret-looking key (``password``,
``api_key``, ``access_token`` …, also spelled ``apiKey``, ``x-api-key``, ``clientSecret``) holding
a literal string. Mapping keys are checked for token shapes too (a finding there names the key
by its position, never its text). References pass: ``${env:NAME}`` and
``secret://…``. Findings name the JSON path and the kind, never the value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from alpstore.errors import SecretError

TOKEN_SHAPES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    ("private key block", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")),
    ("AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{40,})")),
    ("Anthropic API key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}")),
    ("OpenAI API key", re.compile(r"\bsk-(?:proj-|svcacct-)?[A-Za-z0-9]{20,}[A-Za-z0-9_-]*")),
    ("Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("Stripe secret key", re.compile(r"\b[rs]k_live_[0-9A-Za-z]{20,}")),
    (
        "JSON Web Token",
        re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
    ),
)
"""Well-known credential shapes, checked in every string of the document."""

SECRET_KEY: Final = re.compile(
    r"(?:^|[_\-.])(?:password|passwd|passphrase|secret|client_secret|token|access_token|"
    r"refresh_token|auth_token|bearer_token|api_key|apikey|access_key|secret_key|private_key|"
    r"credential|credentials)$",
    re.IGNORECASE,
)
"""Key names whose literal string values are treated as credentials (the name's last word)."""

REFERENCE: Final = re.compile(r"^(?:\$\{env:[A-Za-z_][A-Za-z0-9_]*\}|secret://\S+)$")
"""Values that point at a credential instead of holding it."""

_QUICK: Final = re.compile(r"-----BEGIN|AKIA|ASIA|gh[pousr]_|github_pat_|sk-|xox|AIza|k_live_|eyJ")
"""A cheap pre-filter: a string without any of these prefixes cannot match a token shape."""


@dataclass(frozen=True)
class Finding:
    """One inline secret: where it is (JSON path) and what it looks like (never the value)."""

    path: str
    kind: str


_QUICK_LITERALS: Final = (
    "-----BEGIN",
    "AKIA",
    "ASIA",
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "ghr_",
    "github_pat_",
    "sk-",
    "xox",
    "AIza",
    "k_live_",
    "eyJ",
)
"""Every token shape starts with one of these: a text without them holds no token."""
_KEY_ENDINGS: Final = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "api_key",
    "apikey",
    "access_key",
    "secret_key",
    "private_key",
    "credential",
    "credentials",
)


_KEY_SPELLINGS: Final = (
    *(spelling for w in _KEY_ENDINGS for spelling in {w, w.upper(), w.capitalize()}),
    "Key",  # apiKey, accessKey, secretKey, privateKey (camel case)
    "-key",  # x-api-key (kebab case)
)
_MIXED_CASE_KEY: Final = re.compile(r"[A-Z][A-Za-z_]*[a-z][A-Za-z_]*[A-Z][A-Za-z_]*\": \"")
"""Only a key in unusual mixed case needs the slower lower-cased search."""


def may_hold_secrets(json_text: str) -> bool:
    """False when the JSON text (``json.dumps`` spelling) of a document certainly holds no
    finding: substring searches run at C speed, so a clean 10 MB export passes in milliseconds.
    """
    if any(literal in json_text for literal in _QUICK_LITERALS):
        return True
    return any(f'{word}": "' in json_text for word in _KEY_SPELLINGS) or (
        any(f'{word}": "' in json_text.lower() for word in _KEY_ENDINGS)
        if _MIXED_CASE_KEY.search(json_text)
        else False
    )


_LITERALS_B: Final = tuple(lit.encode() for lit in _QUICK_LITERALS)
_SPELLINGS_B: Final = tuple(f'{w}":"'.encode() for w in _KEY_SPELLINGS)
_ENDINGS_B: Final = tuple(f'{w}":"'.encode() for w in _KEY_ENDINGS)
_MIXED_CASE_KEY_B: Final = re.compile(rb"[A-Z][A-Za-z_]*[a-z][A-Za-z_]*[A-Z][A-Za-z_]*\":\"")


def may_hold_secrets_canonical(raw: bytes) -> bool:
    """:func:`may_hold_secrets` for canonical JSON bytes (``"key":"value"``, no space), without
    copying them: what a streamed export checks for every message.
    """
    if any(literal in raw for literal in _LITERALS_B):
        return True
    if any(spelling in raw for spelling in _SPELLINGS_B):
        return True
    return bool(_MIXED_CASE_KEY_B.search(raw)) and any(e in raw.lower() for e in _ENDINGS_B)


def _key_path(path: str, key: str) -> str:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f"{path}.{key}"
    escaped = key.replace("\\", "\\\\").replace('"', '\\"')
    return f'{path}["{escaped}"]'


def _token_kind(text: str) -> str | None:
    """The kind of credential ``text`` holds, or None."""
    if not _QUICK.search(text):
        return None
    for kind, pattern in TOKEN_SHAPES:
        if pattern.search(text):
            return kind
    return None


def _check_string(text: str, path: str, out: list[Finding]) -> None:
    kind = _token_kind(text)
    if kind is not None:
        out.append(Finding(path, kind))


_CAMEL_BOUNDARY: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def secret_looking_key(key: str) -> bool:
    """True when ``key``'s last word names a credential, in any spelling: ``api_key``,
    ``apiKey``, ``x-api-key``, ``clientSecret``, ``ACCESS_TOKEN``.
    """
    plain = key.replace("-", "_")
    return bool(SECRET_KEY.search(plain) or SECRET_KEY.search(_CAMEL_BOUNDARY.sub("_", plain)))


def _literal_secret(key: object, value: object) -> bool:
    if not isinstance(key, str) or not isinstance(value, str) or not secret_looking_key(key):
        return False
    text = value.strip()
    return bool(text) and not REFERENCE.match(text)


def scan(value: Any, path: str = "$") -> list[Finding]:
    """Every inline secret in ``value``, in document order."""
    out: list[Finding] = []
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            _check_string(item, where, out)
        elif isinstance(item, dict):
            children = []
            for index, (key, sub) in enumerate(item.items(), 1):
                key_kind = _token_kind(str(key))
                if key_kind is not None:  # a path through this key would print it: not walked
                    out.append(Finding(f"{where} (key {index})", f"{key_kind} used as a key"))
                    continue
                sub_path = _key_path(where, str(key))
                if _literal_secret(key, sub):
                    out.append(Finding(sub_path, f"literal value under secret-looking key {key!r}"))
                    continue
                children.append((sub, sub_path))
            stack.extend(reversed(children))
        elif isinstance(item, list | tuple):
            stack.extend(reversed([(sub, f"{where}[{i}]") for i, sub in enumerate(item)]))
    return out


def scan_parts(parts: Iterable[tuple[Any, str]]) -> list[Finding]:
    """Scan several documents, each with its own root path."""
    found: list[Finding] = []
    for value, path in parts:
        found.extend(scan(value, path))
    return found


def require_no_secrets(
    value: Any, *, what: str, path: str = "$", json_text: str | None = None
) -> None:
    """Refuse a document that holds inline secrets.

    ``json_text``, the document already serialised, lets a clean document pass in one regex
    scan instead of a walk.

    Raises:
        SecretError: one or more findings; the message lists their JSON paths (at most 10).
    """
    if json_text is not None and not may_hold_secrets(json_text):
        return
    findings = scan(value, path)
    if findings:
        raise secret_error(findings, what=what)


def secret_error(findings: list[Finding], *, what: str) -> SecretError:
    """The error for a list of findings (paths and kinds only)."""
    shown = "; ".join(f"{f.path} ({f.kind})" for f in findings[:10])
    more = f"; and {len(findings) - 10} more" if len(findings) > 10 else ""
    return SecretError(
        f"{what}: refusing to write, inline secret(s) at {shown}{more}; nothing was written",
        hint="keep credentials as ${env:NAME} or secret://… references",
    )
