"""No inline secrets in a checkpoint (CK-11): find credentials before anything is written.

Three kinds of finding: a string shaped like a well-known token (AWS, GitHub, OpenAI, Anthropic,
Slack, Google, Stripe, JWT), a private key block, and a secret-looking key (``password``,
``api_key``, ``access_token`` …, also spelled ``apiKey``, ``x-api-key``, ``clientSecret``) holding
a literal string. Mapping keys are checked for token shapes too (a finding there names the key
by its position, never its text). References pass: ``${env:NAME}`` and
``secret://…``. Findings name the JSON path and the kind, never the value.

Linear in its input (issue 39): a file from another machine chooses what is scanned. No pattern
retries a run it already read from another start inside it: a pattern whose start may recur
inside its own run (``eyJ…`` after ``-``, a URL scheme after ``.``) either consumes the run
when it fails (an alternative that matches the rest, so ``finditer`` goes on after it) or
starts only where a run starts (a lookbehind); runs are read possessively (``*+``, ``++``) where
a backtrack cannot help; a key's secret-looking word is looked for in its last characters only.
The mixed-case key pre-filter was a regex roughly quartic on a run of mixed-case letters (a
1,000-character ``AaAa…`` message: ~20 s to export): a lower-cased substring search now.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote

from alpstore.errors import SecretError


def _led(literal: str, rest: str) -> re.Pattern[str]:
    r"""A pattern that starts with ``literal``: the regex engine skips to each occurrence at C
    speed and never tries a start elsewhere. The word boundary ``\b`` said before the literal is
    checked on each match (:func:`_at_word_start`): a lookbehind cost three times as much on
    every occurrence, and occurrences are what an adversarial text is made of.
    """
    return re.compile(re.escape(literal) + rest)


def _at_word_start(text: str, pos: int, before: str = "") -> bool:
    r"""``\b`` at ``pos``; with ``before`` (the letters one character of the token may be
    before its literal: ``rs`` for ``[rs]k_live_``), that character, then ``\b`` before it.
    """
    if before:
        if pos < 1 or text[pos - 1] not in before:
            return False
        pos -= 1
    return pos < 1 or not (text[pos - 1].isalnum() or text[pos - 1] == "_")


def _search(pattern: re.Pattern[str], text: str, before: str = "") -> bool:
    """True when ``pattern`` matches at a word start of ``text``. A match elsewhere resumes
    the search one character after its start (a token at a word start inside it is not lost);
    each try costs a bounded number of steps, so this stays linear.
    """
    m = pattern.search(text)
    while m is not None:
        if _at_word_start(text, m.start(), before):
            return True
        m = pattern.search(text, m.start() + 1)
    return False


TOKEN_SHAPES: Final[tuple[tuple[str, str, re.Pattern[str], str], ...]] = (
    (
        "private key block",
        "-----BEGIN ",
        # at most 8 words of at most 32 letters before PRIVATE KEY (a bound on what one
        # start examines: RSA, EC, OPENSSH, ENCRYPTED, PGP … are one or two)
        re.compile(
            r"-----BEGIN (?:(?!PRIVATE KEY)[A-Z0-9]{1,32}+ ){0,8}+PRIVATE KEY(?: BLOCK)?-----"
        ),
        "",
    ),
    ("AWS access key id", "AKIA", _led("AKIA", r"[0-9A-Z]{16}\b"), ""),
    ("AWS access key id", "ASIA", _led("ASIA", r"[0-9A-Z]{16}\b"), ""),
    ("GitHub token", "gh", _led("gh", r"[pousr]_[A-Za-z0-9]{36}"), ""),
    ("GitHub token", "github_pat_", _led("github_pat_", r"[A-Za-z0-9_]{40}"), ""),
    ("Anthropic API key", "sk-", _led("sk-", r"ant-[A-Za-z0-9_-]{20}"), ""),
    ("OpenAI API key", "sk-", _led("sk-", r"(?:proj-|svcacct-)?[A-Za-z0-9]{20}"), ""),
    ("Slack token", "xox", _led("xox", r"[abposr]-[A-Za-z0-9-]{10}"), ""),
    ("Google API key", "AIza", _led("AIza", r"[0-9A-Za-z_-]{35}\b"), ""),
    ("Stripe secret key", "k_live_", _led("k_live_", r"[0-9A-Za-z]{20}"), "rs"),
    ("Hugging Face token", "hf_", _led("hf_", r"[A-Za-z0-9]{30}"), ""),
    ("GitLab token", "glpat-", _led("glpat-", r"[A-Za-z0-9_-]{20}"), ""),
    (
        "JSON Web Token",
        "eyJ",
        # the second alternative eats the rest of the run when the first fails: a later "eyJ"
        # in the same run ("eyJ-eyJ-…") reaches the same end and would fail too
        re.compile(
            r"eyJ(?:(?P<hit>[A-Za-z0-9_-]{10,}+\.eyJ[A-Za-z0-9_-]{10,}+\.[A-Za-z0-9_-]{10})"
            r"|[A-Za-z0-9_-]*+)"
        ),
        "",
    ),
)
"""Well-known credential shapes, checked in every string of the document: ``(kind, the literal
every match starts with, pattern)``. A pattern says only what makes a match (``{20}``, not
``{20,}``: a longer token matches too), so a start that fails costs a bounded number of steps;
the private key's words are read possessively (each ends with its space: nothing to retry)."""

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

_URL_PASSWORD: Final = re.compile(r"://[^\s/?#@:\"']*+:([^\s/?#@\"']++)@")
_URL_PASSWORD_B: Final = re.compile(rb"://(?<=[A-Za-z0-9+.-]://)[^\s/?#@:\"']*+:[^\s/?#@\"']++@")
"""``scheme://user:password@``: the password group (an empty one is no finding). Led by
``://`` (the engine skips to each at C speed; the scheme is the character before it, checked
on each match: :func:`_url_passwords`): the
scheme was ``\b[A-Za-z][A-Za-z0-9+.-]*`` before, tried from every word start inside a run of
scheme characters (``a.a.a.…://``: quadratic)."""

_HEADER_VALUE: Final = re.compile(r"\{\{[^{}]*+\}\}|[^\s;,\"']++")
_HEADER_LINES: Final = (
    _led("authorization", r"\s*+:\s*+(?:(?:bearer|basic|token|digest|negotiate)\s+)?"),
    _led("x-api-key", r"\s*+:\s*+"),
    _led("cookie", r"\s*+:\s*+[^\s=;:\"']{1,256}+="),
)
"""``Authorization: Bearer …``, ``Proxy-Authorization: …``, ``X-Api-Key: …``, ``Cookie: a=…``
(a ``{{ var }}`` template, spaces and all, is one value), matched in the lower-cased text, each
led by its name. The value is read only after a name at a word start (a name elsewhere, such as
``xcookie: a=…``, resumes the search one character on: reading its value each time was
quadratic). A cookie's name holds no ``:`` and at most 256 characters (``cookie:cookie:…``
was quadratic: 200 KB took ~28 s to export)."""


def _header_values(text: str) -> Iterable[str]:
    lower = text.lower()
    for pattern in _HEADER_LINES:
        m = pattern.search(lower)
        while m is not None:
            if _at_word_start(lower, m.start()):
                value = _HEADER_VALUE.match(lower, m.end())
                if value is None:  # "bearer" alone: the scheme word is the value
                    m = pattern.search(lower, m.end())
                    continue
                yield value.group()
                m = pattern.search(lower, value.end())
            else:
                m = pattern.search(lower, m.start() + 1)


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
_HEADER_LITERALS: Final = ("uthorization", "UTHORIZATION", "ookie", "OOKIE", "pi-key", "PI-KEY")
"""Authorization / Proxy-Authorization / Cookie / X-Api-Key, in the spellings headers use."""
_ENV_NAME: Final = re.compile(r'"name": ?"([^"]*+)"')
_ENV_NAME_B: Final = re.compile(rb'"name": ?"([^"]*+)"')
_ENV_WORDS: Final = ("password", "passwd", "passphrase", "secret", "token", "key", "credential")
"""What an env entry's name ends with when it holds a credential (``credentials`` included)."""


def _env_named(name: str) -> bool:
    tail = name[-16:].lower()
    return tail.endswith(_ENV_WORDS) or tail.endswith("credentials")


def _may_hold_other(text: str) -> bool:
    """URL passwords, credential headers and ``{name, value}`` env lists (the slower checks)."""
    if "://" in text and _URL_PASSWORD.search(text):
        return True
    if any(literal in text for literal in _HEADER_LITERALS) or "pi-Key" in text:
        return True
    return '"value":' in text and any(_env_named(m.group(1)) for m in _ENV_NAME.finditer(text))


def may_hold_secrets(json_text: str) -> bool:
    """False when the JSON text (``json.dumps`` spelling) of a document certainly holds no
    finding: substring searches run at C speed, so a clean 10 MB export passes in milliseconds.
    """
    if any(literal in json_text for literal in _QUICK_LITERALS):
        return True
    if any(f'{word}": ' in json_text for word in _KEY_SPELLINGS) or _may_hold_other(json_text):
        return True
    if '": ' not in json_text or json_text.islower():
        return False
    lower = json_text.lower()  # a key in unusual mixed case (``PassWord``): linear, at C speed
    return any(f'{word}": ' in lower for word in _KEY_ENDINGS)


_LITERALS_B: Final = tuple(lit.encode() for lit in _QUICK_LITERALS)
_HEADERS_LOWER_B: Final = tuple(sorted({lit.lower().encode() for lit in _HEADER_LITERALS}))
_KEYS_LOWER_B: Final = tuple(
    f'{w}":'.encode() for w in (*(w for w in _KEY_ENDINGS if not w.endswith("key")), "key")
)
"""Every key spelling of :data:`_KEY_SPELLINGS` and ending of :data:`_KEY_ENDINGS`, lower case
(``key":`` stands for ``api_key``, ``apikey``, ``access_key`` … ``Key`` and ``-key``)."""


@functools.cache
def _searches() -> tuple[tuple[Callable[[bytes], Any], ...], ...]:
    """The prefilter's grouped searches, compiled on first use (not at import: ~1.5 ms).

    - :data:`_QUICK_LITERALS` in 8 searches instead of 16, each at least as fast as ``in``:
      ``re`` looks for a pattern's first byte alone (a ``memchr``-like loop) and then for the
      rest, where ``in`` skips through the text by the literal's length; literals that share a
      first byte share the search (``e`` is too common a first byte: ``in`` for ``eyJ``);
    - :data:`_HEADERS_LOWER_B` and :data:`_KEYS_LOWER_B` in the lower-cased text, the keys in 5
      searches instead of 9.

    Fixed alternatives: no backtracking. A test holds them to one ``in`` per literal.
    """
    literals = (
        re.compile(rb"A(?:[KS]IA|Iza)").search,
        re.compile(rb"g(?:h[pousr]_|ithub_pat_|lpat-)").search,
        re.compile(rb"-----BEGIN").search,
        re.compile(rb"sk-").search,
        re.compile(rb"xox").search,
        re.compile(rb"k_live_").search,
        re.compile(rb"hf_").search,
        lambda raw: b"eyJ" in raw,
    )
    headers = (
        re.compile(rb"ookie").search,
        re.compile(rb"pi-key").search,
        lambda lower: b"uthorization" in lower,  # (long: ``in`` skips 12 bytes at a time)
    )
    keys = (
        re.compile(rb'pass(?:word|wd|phrase)":').search,
        re.compile(rb'secret":').search,
        re.compile(rb'token":').search,
        re.compile(rb'credentials?":').search,
        re.compile(rb'key":').search,
    )
    return literals, headers, keys


def may_hold_secrets_canonical(raw: bytes) -> bool:
    """:func:`may_hold_secrets` for canonical JSON bytes (``"key":"value"``, no space): what a
    streamed export or a session file's import checks for every batch of messages.

    The key and header spellings are looked for once, in the lower-cased text (one C pass):
    a superset of the spellings :func:`may_hold_secrets` looks for one by one (``PassWord``,
    ``"key":`` also answer True: the walk then decides), in 11 searches instead of 57 (issue 41:
    a 4 MB session file's prefilter 89 -> ~50 ms). The literals that share a first byte are
    looked for together, by ``re`` (4.3 MB: ~65 -> ~30 ms).
    """
    literals, headers, keys = _searches()
    if any(search(raw) for search in literals):
        return True
    if _URL_PASSWORD_B.search(raw):
        return True
    if b'"value":' in raw and any(
        _env_named(m.group(1).decode("utf-8", "replace")) for m in _ENV_NAME_B.finditer(raw)
    ):
        return True
    lower = raw.lower()
    if any(search(lower) for search in headers):
        return True
    return b'":' in raw and any(search(lower) for search in keys)


def _key_path(path: str, key: str) -> str:
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        return f"{path}.{key}"
    escaped = key.replace("\\", "\\\\").replace('"', '\\"')
    return f'{path}["{escaped}"]'


def _token_kind(text: str) -> str | None:
    """The kind of credential ``text`` holds, or None."""
    if len(text) <= 256 and not _QUICK.search(text):  # short (mapping keys): one search
        return None
    for kind, literal, pattern, before in TOKEN_SHAPES:
        if literal not in text:  # a substring search at C speed
            continue
        if pattern.groups:
            if _jwt(pattern, text):
                return kind
        elif _search(pattern, text, before):
            return kind
    return None


def _jwt(pattern: re.Pattern[str], text: str) -> bool:
    """A JSON Web Token at a word start. Each match covers one run of token characters (the
    second alternative eats the run when the first fails), and every start inside one run ends
    where it ends: the first start at a word start decides the run. A match that is not at one
    looks for that start (after a ``-``, the run's only non-word character) and tries it once.
    """
    for m in pattern.finditer(text):
        start = m.start()
        if _at_word_start(text, start):
            if m.group("hit") is not None:
                return True
            continue
        run_end = m.end() if m.group("hit") is None else text.index(".", start)
        k = text.find("-eyJ", start, run_end)
        if k >= 0:
            again = pattern.match(text, k + 1)
            if again is not None and again.group("hit") is not None:
                return True
    return False


def _check_string(text: str, path: str, out: list[Finding]) -> None:
    kind = _token_kind(text)
    if kind is not None:
        out.append(Finding(path, kind))
    elif "://" in text and _any_literal(_url_passwords(text)):
        out.append(Finding(path, "password in a URL"))
    elif ":" in text and _any_literal(_header_values(text)):
        out.append(Finding(path, "credential header"))


def _url_passwords(text: str) -> Iterable[str]:
    for m in _URL_PASSWORD.finditer(text):
        start = m.start()
        if start and text[start - 1] in _SCHEME_CHARS:
            yield unquote(m.group(1))


_SCHEME_CHARS: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-"
)


def _any_literal(values: Iterable[str]) -> bool:
    """True when one of ``values`` is not a placeholder (each distinct value checked once: a
    text repeating one placeholder costs a set lookup per repeat).
    """
    seen: set[str] = set()
    for value in values:
        if value in seen:
            continue
        if not is_placeholder(value):
            return True
        seen.add(value)
    return False


_CAMEL_BOUNDARY: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_KEY_TAIL: Final = 48
"""The characters of a key the secret-looking word is looked for in (the longest, with its
separator, is 14; ``x`` stands before a cut key, so ``^`` never matches inside it)."""


def secret_looking_key(key: str) -> bool:
    """True when ``key``'s last word names a credential, in any spelling: ``api_key``,
    ``apiKey``, ``x-api-key``, ``clientSecret``, ``ACCESS_TOKEN``.
    """
    # the word ends the key: its last characters decide (a 1 MB key costs no more)
    plain = (
        key.replace("-", "_") if len(key) <= _KEY_TAIL else "x" + key[-_KEY_TAIL:].replace("-", "_")
    )
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
