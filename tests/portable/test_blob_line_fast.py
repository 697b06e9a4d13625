"""Issue 41: a blob line spelled as an export writes it is read in one parse and one encoding
(``travel.blob_line``, ``canonical.parse_canonical``), and is exactly as strict as the full
reading it skips.

- ``parse_canonical`` answers the value only for the canonical JSON of that value (hypothesis:
  every value's canonical bytes are read back; every other spelling json.dumps makes of it is
  answered None unless it is the same bytes), and None for what the strict reading refuses or
  spells otherwise: a repeated key, NaN, whitespace, escapes the encoder does not write, a
  number in another form, trailing bytes, nesting past the bound, more bytes than the limit;
- ``blob_line`` takes only the export's spelling of the line (the keys in order, no space, a
  lowercase digest, a known kind): any other spelling is left to the full reading;
- a session file whose blob lines are in the export's spelling but hold a hostile value (a
  repeated key hashed as written, a non-canonical spelling hashed as written, too deep) is
  refused as before, with the same message the full reading gives, nothing imported; the same
  lines spelled otherwise import with the same session digest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import blake3
import pytest
from hypothesis import given
from hypothesis import strategies as st

from alpstore.canonical import MAX_DEPTH, canonical_json, parse_canonical
from alpstore.errors import CheckpointFileError
from alpstore.portable.travel import SessionReader, blob_line
from alpstore.portable.travel_export import export_session
from alpstore.portable.travel_import import import_session_file
from alpstore.store import Store

LIMIT = 1 << 20

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_the_canonical_bytes_of_any_value_read_back_as_that_value(value: Any) -> None:
    raw = canonical_json(value)
    parsed = parse_canonical(raw, limit=LIMIT)
    assert parsed is not None
    assert canonical_json(parsed[0]) == raw


@given(json_values, st.booleans(), st.booleans(), st.booleans())
def test_any_other_spelling_is_left_to_the_strict_reading(
    value: Any, ascii_only: bool, spaced: bool, unsorted: bool
) -> None:
    text = json.dumps(
        value,
        ensure_ascii=ascii_only,
        separators=(", ", ": ") if spaced else (",", ":"),
        sort_keys=not unsorted,
    ).encode()
    parsed = parse_canonical(text, limit=LIMIT)
    if text == canonical_json(value):
        assert parsed is not None
    else:
        assert parsed is None


@pytest.mark.parametrize(
    "text",
    [
        b'{"a":1,"a":1}',  # a repeated key (json keeps one: the bytes differ)
        b'{"a":{"b":1,"b":2}}',
        b'{"b":1,"a":1}',  # keys out of order
        b"NaN",
        b'{"a":Infinity}',
        b"[-Infinity]",
        b" 1",
        b"1 ",
        b"[1, 2]",
        b'{"a": 1}',
        b"1E5",
        b"1.0e0",
        b"-0",
        b"01",
        b'"\\u00e9"',  # an escape the encoder does not write
        b'"\\/"',
        b'"\\ud800"',  # a lone surrogate
        b'"\xed\xa0\x80"',  # ... spelled in UTF-8 (not valid UTF-8)
        b'"\xff"',
        b"[1,]",
        b"[1]]",
        b"",
        b'"a"\n',
        b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1),
        b"[" * 100_000 + b"]" * 100_000,
    ],
)
def test_what_the_strict_reading_refuses_or_respells_is_not_read_here(text: bytes) -> None:
    assert parse_canonical(text, limit=LIMIT) is None


def test_the_bounds() -> None:
    deepest = b"[" * MAX_DEPTH + b"]" * MAX_DEPTH
    assert parse_canonical(deepest, limit=LIMIT) is not None
    brackets_in_a_string = b'"' + b"[{" * 1000 + b'"'
    assert parse_canonical(brackets_in_a_string, limit=LIMIT) == ("[{" * 1000,)
    assert parse_canonical(b'"abc"', limit=5) == ("abc",)
    assert parse_canonical(b'"abc"', limit=4) is None
    assert parse_canonical(b"null", limit=LIMIT) == (None,)


# ---------------------------------------------------------------- the line
def export_line(value_text: bytes, kind: str = "message", digest: str | None = None) -> bytes:
    """A blob line as ``travel_export`` spells it, the value's text as given."""
    hexd = digest or blake3.blake3(value_text).hexdigest()
    return b'{"type":"blob","digest":"%s","kind":"%s","value":%s}' % (
        hexd.encode(),
        kind.encode(),
        value_text,
    )


def test_the_export_spelling_gives_the_record_the_strict_parse_gives() -> None:
    value = {"content": 'héllo "x"\n', "role": "user", "n": [1, 2.5, None, True]}
    line = export_line(canonical_json(value))
    got = blob_line(line)
    assert got is not None
    rec, raw = got
    assert rec == json.loads(line)
    assert list(rec) == ["type", "digest", "kind", "value"]
    assert raw == canonical_json(value)


@pytest.mark.parametrize(
    "line",
    [
        export_line(b'{"a":1}').replace(b'"kind":', b'"kind": '),
        export_line(b'{"a":1}').replace(b"message", b"messages"),
        export_line(b'{"a":1}').replace(b"message", b"mess\\u0061ge"),
        export_line(b'{"a":1}', kind=""),
        export_line(b'{"a":1}', digest="A" * 64),
        export_line(b'{"a":1}', digest="0" * 63 + "g"),
        export_line(b'{"a":1}', digest="0" * 63),
        export_line(b'{"a":1}') + b"\r",
        export_line(b'{"a":1}') + b" ",
        export_line(b'{"a":1}')[:-1],
        export_line(b'{"a":1},"value":2'),
        export_line(b'{"a":1,"a":2}'),
        b'{"digest":"' + b"0" * 64 + b'","kind":"message","type":"blob","value":1}',
    ],
)
def test_any_other_line_is_left_to_the_strict_reading(line: bytes) -> None:
    assert blob_line(line) is None


# ---------------------------------------------------------------- whole files
def exported(tmp_path: Path) -> Path:
    with Store.open(tmp_path / "source") as store:
        s = store.create_session(name="src")
        for i in range(4):
            s.commit_turn([{"role": "user", "content": f"turn {i}"}])
        path = tmp_path / "src.session.jsonl"
        export_session(store, s.id, path)
    return path


def with_first_blob(path: Path, line: bytes) -> Path:
    """The file with its first blob line replaced by ``line`` (no other change: the session
    digest does not cover blob lines' spelling, only their digests through the checkpoints).
    """
    lines = path.read_bytes().splitlines()
    assert lines[1].startswith(b'{"type":"blob"')
    lines[1] = line
    out = path.with_name("edited.session.jsonl")
    out.write_bytes(b"".join(x + b"\n" for x in lines))
    return out


def first_blob(path: Path) -> tuple[str, bytes]:
    line = path.read_bytes().splitlines()[1]
    rec = json.loads(line)
    return rec["digest"], canonical_json(rec["value"])


def reading(path: Path) -> str | list[Any]:
    """What reading ``path`` gives: the error's message, or every record."""
    try:
        return list(SessionReader(path, seal=False).records())
    except CheckpointFileError as err:
        return err.message


@pytest.mark.parametrize(
    ("respell", "always_refused"),
    [
        # a repeated key
        (lambda raw: raw[:-1] + b',"role":"user"}', True),
        # another spelling of the same value: refused when hashed as written
        (lambda raw: raw.replace(b":", b": ", 1), False),
        (lambda raw: raw.replace(b'"turn', b'"\\u0074urn', 1), False),
        # too deep
        (lambda raw: b'{"x":' + b"[" * (MAX_DEPTH + 5) + b"]" * (MAX_DEPTH + 5) + b"}", True),
    ],
)
@pytest.mark.parametrize("hashed", ["as written", "canonical"])
def test_a_hostile_value_in_the_export_spelling_reads_as_the_full_reading_reads_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    respell: Any,
    always_refused: bool,
    hashed: str,
) -> None:
    """Refused with the same message (the first three hashed as written, the repeated key and
    the deep value either way), or, another spelling of the value hashed canonically, read
    into the same records: the full reading canonicalises what it parsed.
    """
    path = exported(tmp_path)
    digest, raw = first_blob(path)
    text = respell(raw)
    assert text != raw
    hexd = blake3.blake3(text).hexdigest() if hashed == "as written" else digest
    hostile = with_first_blob(path, export_line(text, digest=hexd))
    with monkeypatch.context() as m:
        m.setattr("alpstore.portable.travel.blob_line", lambda line: None)
        expected = reading(hostile)
    assert reading(hostile) == expected
    refused = isinstance(expected, str)
    assert refused == (always_refused or hashed == "as written")
    with Store.open(tmp_path / "target") as store:
        if refused:
            with pytest.raises(CheckpointFileError) as err:
                import_session_file(store, hostile)
            assert err.value.message == expected
            assert store.list_sessions() == []
        else:
            assert (
                import_session_file(store, hostile).digest
                == import_session_file(Store.open(tmp_path / "other"), path).digest
            )


def test_the_same_lines_spelled_otherwise_import_alike(tmp_path: Path) -> None:
    path = exported(tmp_path)
    lines = path.read_bytes().splitlines()
    respelled = [lines[0]] + [
        json.dumps(json.loads(x), indent=None, separators=(", ", ": ")).encode()
        if x.startswith(b'{"type":"blob"')
        else x
        for x in lines[1:]
    ]
    other = tmp_path / "respelled.session.jsonl"
    other.write_bytes(b"".join(x + b"\n" for x in respelled))
    digests = []
    for i, source in enumerate((path, other)):
        with Store.open(tmp_path / f"t{i}") as store:
            done = import_session_file(store, source)
            digests.append((done.digest, done.blobs, done.inserted))
    assert digests[0] == digests[1]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("A" * 64, "checkpoint line: $.add: every entry must be a blob digest"),
        (7, "checkpoint line: $.add: every entry must be a blob digest"),
        ([1], "checkpoint line: $.add: every entry must be a blob digest"),
        ({"a": 1}, "checkpoint line: $.add: every entry must be a blob digest"),
        ("0" * 64, "which the file does not hold"),
    ],
)
def test_a_checkpoint_adding_what_is_not_a_blob_of_the_file_is_refused(
    tmp_path: Path, entry: Any, message: str
) -> None:
    """The entries of a checkpoint's ``add`` are taken at once when all are digests of blobs
    read; any other is checked one by one, with the messages it always had.
    """
    path = exported(tmp_path)
    lines = path.read_bytes().splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith(b'{"type":"checkpoint"'))
    rec = json.loads(lines[at])
    rec["add"] = [*rec["add"], entry]
    lines[at] = json.dumps(rec).encode()
    path.write_bytes(b"".join(x + b"\n" for x in lines))
    with pytest.raises(CheckpointFileError, match=message.replace("$", r"\$")):
        list(SessionReader(path, seal=False).records())


def test_a_checkpoint_adding_a_state_blob_is_refused(tmp_path: Path) -> None:
    path = exported(tmp_path)
    lines = path.read_bytes().splitlines()
    state = export_line(canonical_json({"x": 1}), kind="state")
    hexd = blake3.blake3(canonical_json({"x": 1})).hexdigest()
    at = next(i for i, x in enumerate(lines) if x.startswith(b'{"type":"checkpoint"'))
    rec = json.loads(lines[at])
    rec["add"] = [*rec["add"], hexd]
    lines[at] = json.dumps(rec).encode()
    lines.insert(1, state)
    path.write_bytes(b"".join(x + b"\n" for x in lines))
    with pytest.raises(CheckpointFileError, match=f"names blob {hexd[:16]}…, a state"):
        list(SessionReader(path, seal=False).records())


def test_a_batch_is_looked_up_unless_the_archive_held_no_blob(tmp_path: Path) -> None:
    """Into an SQLite archive that holds no blob, an import stores its batches packed without
    looking them up (the file repeats no digest); into one that holds some, it looks them up
    and stores none of them twice.
    """
    from alpstore.db import raw as rsql

    with Store.open(tmp_path / "source") as store:
        files = []
        for name in ("one", "two"):  # the same messages: the same digests
            s = store.create_session(name=name)
            for i in range(4):
                s.commit_turn([{"role": "user", "content": f"turn {i}"}])
            files.append(tmp_path / f"{name}.session.jsonl")
            export_session(store, s.id, files[-1])
    with Store.open(tmp_path / "target") as store:
        if not store.db.is_sqlite:
            pytest.skip("SQLite only: PostgreSQL always looks them up")
        first = import_session_file(store, files[0])
        second = import_session_file(store, files[1])
        assert (first.blobs, first.inserted) == (4, 4)
        assert (second.blobs, second.inserted) == (4, 0)
        with store.db.read() as conn:
            twice = rsql.fetchall(
                conn, "SELECT digest FROM blobs GROUP BY digest HAVING count(*) > 1"
            )
        assert twice == []
        assert not store.archive.verify().problems
