from __future__ import annotations

import json
import math
import re
import threading

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from alpstore.codec import (
    CODEC_RAW,
    Compressor,
    Decompressor,
    canonical_json,
    decompress_file_bytes,
    digest_bytes,
    parse_digest,
    parse_json,
)
from alpstore.errors import CanonicalJSONError, IntegrityError, UsageError

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=25,
)


def test_canonical_bytes_are_sorted_compact_and_utf8() -> None:
    assert canonical_json({"b": 1, "a": ["é", {"d": None, "c": True}]}) == (
        '{"a":["é",{"c":true,"d":null}],"b":1}'.encode()
    )


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"a": [1, float("nan")]}, "$.a[1]"),
        ({"a": {"b": math.inf}}, "$.a.b"),
        ({"x": {1: "one"}}, "$.x"),
        ({"when": object()}, "$.when"),
        ({"s": "\ud800"}, "$.s"),
    ],
)
def test_non_canonical_values_are_refused_with_their_path(value: object, path: str) -> None:
    with pytest.raises(CanonicalJSONError) as err:
        canonical_json(value)
    assert err.value.message.startswith(path)


@given(json_values)
def test_round_trip(value: object) -> None:
    assert json.loads(canonical_json(value)) == value


@given(st.dictionaries(st.text(max_size=6), st.integers(), min_size=2, max_size=8))
def test_key_order_never_changes_the_digest(d: dict[str, int]) -> None:
    reordered = dict(reversed(list(d.items())))
    assert digest_bytes(canonical_json(d)) == digest_bytes(canonical_json(reordered))


@given(st.binary(max_size=3000))
def test_compress_round_trip_and_never_grows(raw: bytes) -> None:
    codec, payload = Compressor().compress(raw)
    assert len(payload) <= len(raw)
    assert Decompressor().decompress(codec, payload, len(raw), what="t") == raw


def test_incompressible_data_is_stored_raw() -> None:
    raw = bytes(range(256))
    codec, payload = Compressor().compress(raw)
    assert codec == CODEC_RAW and payload == raw


def test_decompression_is_bounded_by_the_recorded_size() -> None:
    bomb = zstandard.ZstdCompressor().compress(b"\0" * (64 << 20))
    with pytest.raises(IntegrityError, match="recorded size is 1000"):
        Decompressor().decompress(1, bomb, 1000, what="blob x")
    with pytest.raises(IntegrityError, match="more than 4096 bytes"):
        decompress_file_bytes(bomb, limit=4096, what="f.zst")


def test_corrupt_frame_is_an_integrity_error() -> None:
    with pytest.raises(IntegrityError, match="blob y"):
        Decompressor().decompress(1, b"\x28\xb5\x2f\xfd garbage", 10, what="blob y")


def test_parse_digest_and_json_errors() -> None:
    assert parse_digest("AB" * 32) == bytes.fromhex("ab" * 32)
    with pytest.raises(UsageError):
        parse_digest("abc")
    with pytest.raises(UsageError):
        parse_digest("zz" * 32)
    with pytest.raises(CanonicalJSONError, match="stdin"):
        parse_json(b"{nope", where="stdin")
    with pytest.raises(CanonicalJSONError):
        parse_json(b"[NaN]", where="x")


@given(json_values)
def test_canonical_json_of_a_parsed_value_is_canonical_json(value: object) -> None:
    """The import's fast path (issue 14): the C encoder made once, keys not walked."""
    from alpstore.codec import canonical_json_parsed

    parsed = json.loads(json.dumps(value))
    assert canonical_json_parsed(parsed) == canonical_json(parsed)


@pytest.mark.parametrize("text", ['{"a": 1e999}', '["\\ud800"]', '{"b": [-1e400]}'])
def test_canonical_json_of_a_parsed_value_refuses_what_canonical_json_refuses(text: str) -> None:
    from alpstore.codec import canonical_json_parsed

    with pytest.raises(CanonicalJSONError) as fast:
        canonical_json_parsed(json.loads(text))
    with pytest.raises(CanonicalJSONError) as slow:
        canonical_json(json.loads(text))
    assert fast.value.message == slow.value.message


_BLOBS = st.lists(
    st.one_of(
        st.binary(max_size=300),  # incompressible, or empty: kept raw
        st.text(alphabet='ab{}":,', max_size=3000).map(str.encode),  # compresses
    ),
    max_size=40,
)


def _trained() -> bytes:
    samples = [
        json.dumps({"role": "user", "content": f"message {i} " + "word " * (i % 17)}).encode()
        for i in range(400)
    ]
    return zstandard.train_dictionary(4096, samples).as_bytes()


_DICTIONARY = _trained()


@settings(max_examples=60, deadline=None)
@given(_BLOBS, st.booleans(), st.integers(0, 400))
def test_compress_many_makes_what_one_call_a_blob_makes(
    raws: list[bytes], with_dictionary: bool, dictionary_max: int
) -> None:
    """The batch call (zstd's threads, no interpreter lock) gives the same codec and frame as
    :meth:`Compressor.compress` blob by blob, on both sides of the batch-size threshold."""
    comp = Compressor(dictionary=_DICTIONARY if with_dictionary else None)
    expected = [comp.compress(raw, use_dictionary=len(raw) <= dictionary_max) for raw in raws]
    assert comp.compress_many(raws, dictionary_max=dictionary_max) == expected


def test_compress_many_of_a_large_batch_uses_one_batch_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raws = [json.dumps({"n": i, "text": "abc " * (i % 50)}).encode() for i in range(300)]
    raws.append(bytes(range(256)))  # incompressible: kept raw
    comp = Compressor(dictionary=_DICTIONARY)
    expected = [comp.compress(raw, use_dictionary=len(raw) <= 200) for raw in raws]
    calls: list[int] = []
    original = zstandard.ZstdCompressor.multi_compress_to_buffer

    def counted(self: zstandard.ZstdCompressor, data: object, threads: int = 0) -> object:
        calls.append(threads)
        return original(self, data, threads=threads)

    monkeypatch.setattr(zstandard.ZstdCompressor, "multi_compress_to_buffer", counted)
    assert comp.compress_many(raws, dictionary_max=200) == expected
    assert len(calls) == 2  # the dictionary's blobs, then the rest


@settings(max_examples=25, deadline=None)
@given(st.lists(_BLOBS, min_size=2, max_size=6), st.booleans())
def test_a_compressor_shared_by_threads_makes_what_a_private_one_makes(
    batches: list[list[bytes]], with_dictionary: bool
) -> None:
    """Threads compressing at once through one compressor (each call takes a pooled pair of
    contexts for itself) get the frames a compressor of their own gives, and every pair goes
    back to the pool; a call that raises keeps none."""
    dictionary = _DICTIONARY if with_dictionary else None
    shared = Compressor(dictionary=dictionary)
    expected = [[Compressor(dictionary=dictionary).compress(r) for r in b] for b in batches]
    start = threading.Barrier(len(batches))
    results: list[list[tuple[int, bytes]] | BaseException | None] = [None] * len(batches)

    def work(i: int) -> None:
        try:
            start.wait()
            out = [shared.compress(raw) for raw in batches[i]]
            assert shared.compress_many(batches[i], dictionary_max=400) == [
                shared.compress(raw, use_dictionary=len(raw) <= 400) for raw in batches[i]
            ]
            results[i] = out
        except BaseException as exc:  # reported below
            results[i] = exc

    workers = [threading.Thread(target=work, args=(i,)) for i in range(len(batches))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert results == expected
    assert 1 <= len(shared._free) <= len(batches)  # every pair back, none made twice over
    pairs = len(shared._free)
    with pytest.raises(TypeError):
        shared.compress("not bytes")  # type: ignore[arg-type]
    assert len(shared._free) == pairs - 1  # the pair of a call that failed is dropped


@given(json_values, st.integers(min_value=0, max_value=3))
def test_a_document_with_a_long_string_encodes_to_the_same_bytes(value: object, where: int) -> None:
    """Issue 43: a document holding a string of LARGE_STRING characters or more is encoded piece
    by piece (a transcript's 8 MB tool result peaked at 40 MB above the document in the
    one-shot encoder); the bytes are the one-shot encoder's."""
    from alpstore import canonical

    long = ('a→"\\\n\u2028é😀' * 5) * (canonical.LARGE_STRING // 35 + 1)
    doc: object = [value, long] if where == 0 else {"k": value, "z": {"long": long}}
    if where == 2:
        doc = long
    if where == 3:
        doc = {"t": [value, [long, -0.0, 10**40, 1.5e300]]}
    fast = canonical._encoder.encode(doc).encode("utf-8")
    assert canonical._keys_are_strings(doc) == canonical._LARGE
    assert canonical.canonical_json(doc) == fast


def test_a_long_string_document_is_refused_as_before() -> None:
    from alpstore import canonical

    long = "x" * canonical.LARGE_STRING
    for doc, path in (([long, math.nan], "$[1]"), ({"a": long, "b": "\ud800"}, "$.b")):
        with pytest.raises(CanonicalJSONError, match=re.escape(path)):
            canonical_json(doc)
