"""The canonical-bytes prefilter looks for its literals with grouped ``re`` searches (issue 41):
it must answer exactly what one ``in`` per literal answers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from alpstore.rules import secrets
from alpstore.rules.secrets import may_hold_secrets_canonical


def _one_by_one(raw: bytes) -> bool:
    """The prefilter as it was: each literal and spelling looked for on its own."""
    if any(literal in raw for literal in secrets._LITERALS_B):
        return True
    if b"://" in raw and secrets._URL_PASSWORD_B.search(raw):
        return True
    if b'"value":' in raw and any(
        secrets._env_named(m.group(1).decode("utf-8", "replace"))
        for m in secrets._ENV_NAME_B.finditer(raw)
    ):
        return True
    lower = raw.lower()
    if any(h in lower for h in secrets._HEADERS_LOWER_B):
        return True
    return b'":' in raw and any(k in lower for k in secrets._KEYS_LOWER_B)


_PIECES = [
    *(lit for lit in secrets._LITERALS_B),
    *(k for k in secrets._KEYS_LOWER_B),
    *(k.upper() for k in secrets._KEYS_LOWER_B),
    *(h for h in secrets._HEADERS_LOWER_B),
    *(lit[:-1] for lit in secrets._LITERALS_B),  # one byte short: must not answer
    *(lit[1:] for lit in secrets._LITERALS_B),
    b"gh",
    b"A",
    b"AK",
    b"ASI",
    b"credential",
    b"pass",
    b'"',
    b":",
    b'":',
    b"x",
    b" ",
    b"://",
    b"u:p@",
    b"-",
    b"_",
]


def test_every_literal_and_spelling_answers() -> None:
    for piece in (*secrets._LITERALS_B, *secrets._KEYS_LOWER_B, *secrets._HEADERS_LOWER_B):
        assert may_hold_secrets_canonical(b'{"a":"x' + piece + b'y"}'), piece
    for word in secrets._KEY_ENDINGS:
        assert may_hold_secrets_canonical(b'{"' + word.encode() + b'":1}'), word


def test_clean_text_answers_no() -> None:
    text = b'{"content":"Please fix rate limiting in auth.","role":"user"}' * 1000
    assert not may_hold_secrets_canonical(text)
    assert not _one_by_one(text)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=8).map(b"".join))
def test_grouped_searches_answer_as_one_by_one(raw: bytes) -> None:
    assert may_hold_secrets_canonical(raw) == _one_by_one(raw)
