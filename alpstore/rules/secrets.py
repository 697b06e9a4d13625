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
from urllib.parse import unquote

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
    ("Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("GitLab token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20}")),
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

PLACEHOLDER: Final = re.compile(
    r"^(?:<[^<>]*>|[*x\u2022]{3,}|\$\{[^{}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\{\{[^{}]*\}\}"
    r"|\[?(?:changeme|change[-_ ]me|example|redacted|placeholder)\]?)$",
    re.IGNORECASE,
)
"""Values that stand for a credential in docs and templates: ``<password>``, ``***`` / ``xxx`` /
``•••`` (three or more), ``${VAR}``, ``$VAR``, ``{{ var }}``, ``changeme``, ``example``,
``REDACTED`` (whole value, any case, optionally in brackets)."""

_URL_PASSWORD: Final = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:\"']*:([^\s/?#@\"']+)@")
_URL_PASSWORD_B: Final = re.compile(rb"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:\"']*:[^\s/?#@\"']+@")
"""``scheme://user:password@``: the password group (an empty one is no finding)."""

_HEADER_LINE: Final = re.compile(
    r"\b(?:(?:proxy-)?authorization\s*:\s*(?:(?:bearer|basic|token|digest|negotiate)\s+)?"
    r"|x-api-key\s*:\s*|(?:set-)?cookie\s*:\s*[^\s=;\"']+=)(\{\{[^{}]*\}\}|[^\s;,\"']+)",
    re.IGNORECASE,
)
"""``Authorization: Bearer …``, ``Proxy-Authorization: …``, ``X-Api-Key: …``, ``Cookie: a=…``
(a ``{{ var }}`` template, spaces and all, is one value)."""

HEADER_KEY: Final = re.compile(r"^(?:(?:proxy-)?authorization|(?:set-)?cookie)$", re.IGNORECASE)
"""Header names whose values are credentials (``X-Api-Key`` is a secret-looking key already)."""

_AUTH_SCHEME: Final = re.compile(r"^(?:bearer|basic|token|digest|negotiate)\s+", re.IGNORECASE)


def is_placeholder(value: str) -> bool:
    """True when ``value`` is empty, a reference, or a placeholder rather than a credential."""
    text = _AUTH_SCHEME.sub("", value.strip()).strip()
    return not text or bool(REFERENCE.match(text) or PLACEHOLDER.match(text))


_QUICK: Final = re.compile(
    r"-----BEGIN|AKIA|ASIA|gh[pousr]_|github_pat_|sk-|xox|AIza|k_live_|eyJ|hf_|glpat-"
)
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
    "hf_",
    "glpat-",
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
_MIXED_CASE_KEY: Final = re.compile(r"[A-Z][A-Za-z_]*[a-z][A-Za-z_]*[A-Z][A-Za-z_]*\": ")
"""Only a key in unusual mixed case needs the slower lower-cased search."""
_HEADER_LITERALS: Final = ("uthorization", "UTHORIZATION", "ookie", "OOKIE", "pi-key", "PI-KEY")
"""Authorization / Proxy-Authorization / Cookie / X-Api-Key, in the spellings headers use."""
_ENV_NAME: Final = re.compile(
    r'"name": ?"[^"]*(?i:password|passwd|passphrase|secret|token|key|credentials?)"'
)
_ENV_NAME_B: Final = re.compile(
    rb'"name": ?"[^"]*(?i:password|passwd|passphrase|secret|token|key|credentials?)"'
)


def _may_hold_other(text: str) -> bool:
    """URL passwords, credential headers and ``{name, value}`` env lists (the slower checks)."""
    if "://" in text and _URL_PASSWORD.search(text):
        return True
    if any(literal in text for literal in _HEADER_LITERALS) or "pi-Key" in text:
        return True
    return '"value":' in text and bool(_ENV_NAME.search(text))


def may_hold_secrets(json_text: str) -> bool:
    """False when the JSON text (``json.dumps`` spelling) of a document certainly holds no
    finding: substring searches run at C speed, so a clean 10 MB export passes in milliseconds.
    """
    if any(literal in json_text for literal in _QUICK_LITERALS):
        return True
    if any(f'{word}": ' in json_text for word in _KEY_SPELLINGS) or _may_hold_other(json_text):
        return True
    return (
        any(f'{word}": ' in json_text.lower() for word in _KEY_ENDINGS)
        if _MIXED_CASE_KEY.search(json_text)
        else False
    )


_LITERALS_B: Final = tuple(lit.encode() for lit in _QUICK_LITERALS)
_HEADERS_B: Final = tuple(lit.encode() for lit in (*_HEADER_LITERALS, "pi-Key"))
_SPELLINGS_B: Final = tuple(f'{w}":'.encode() for w in _KEY_SPELLINGS)
_ENDINGS_B: Final = tuple(f'{w}":'.encode() for w in _KEY_ENDINGS)
_MIXED_CASE_KEY_B: Final = re.compile(rb"[A-Z][A-Za-z_]*[a-z][A-Za-z_]*[A-Z][A-Za-z_]*\":")


def may_hold_secrets_canonical(raw: bytes) -> bool:
    """:func:`may_hold_secrets` for canonical JSON bytes (``"key":"value"``, no space), without
    copying them: what a streamed export checks for every message.
    """
    if any(literal in raw for literal in _LITERALS_B):
        return True
    if any(spelling in raw for spelling in _SPELLINGS_B):
        return True
    if b"://" in raw and _URL_PASSWORD_B.search(raw):
        return True
    if any(h in raw for h in _HEADERS_B) or (b'"value":' in raw and _ENV_NAME_B.search(raw)):
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
    elif "://" in text and any(
        not is_placeholder(unquote(m.group(1))) for m in _URL_PASSWORD.finditer(text)
    ):
        out.append(Finding(path, "password in a URL"))
    elif ":" in text and any(not is_placeholder(m.group(1)) for m in _HEADER_LINE.finditer(text)):
        out.append(Finding(path, "credential header"))


_CAMEL_BOUNDARY: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def secret_looking_key(key: str) -> bool:
    """True when ``key``'s last word names a credential, in any spelling: ``api_key``,
    ``apiKey``, ``x-api-key``, ``clientSecret``, ``ACCESS_TOKEN``.
    """
    plain = key.replace("-", "_")
    return bool(SECRET_KEY.search(plain) or SECRET_KEY.search(_CAMEL_BOUNDARY.sub("_", plain)))


def _literal_value(value: object) -> bool:
    """True when ``value`` holds a credential: a string other than a placeholder, a number, or a
    list holding either.
    """
    if isinstance(value, str):
        return not is_placeholder(value)
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    if isinstance(value, list | tuple):
        return any(not isinstance(v, list | tuple) and _literal_value(v) for v in value)
    return False


def _literal_secret(key: object, value: object) -> bool:
    if not isinstance(key, str) or not (secret_looking_key(key) or HEADER_KEY.match(key)):
        return False
    return _literal_value(value)


def _env_entry(item: dict[Any, Any]) -> bool:
    """A Kubernetes-style ``{"name": "DB_PASSWORD", "value": "…"}`` entry holding a literal."""
    name = item.get("name")
    return (
        isinstance(name, str)
        and "value" in item
        and (secret_looking_key(name) or bool(HEADER_KEY.match(name)))
        and _literal_value(item["value"])
    )


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
            env = _env_entry(item)
            for index, (key, sub) in enumerate(item.items(), 1):
                key_kind = _token_kind(str(key))
                if key_kind is not None:  # a path through this key would print it: not walked
                    out.append(Finding(f"{where} (key {index})", f"{key_kind} used as a key"))
                    continue
                sub_path = _key_path(where, str(key))
                if _literal_secret(key, sub):
                    out.append(Finding(sub_path, f"literal value under secret-looking key {key!r}"))
                    continue
                if env and key == "value":
                    out.append(Finding(sub_path, "literal value of a secret-looking env entry"))
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
