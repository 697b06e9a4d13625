"""compact-events.jsonl: the append format, rotation, replay of damaged files, dedupe, reduce."""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from alpstore.continuity.journal import (
    append_line,
    build_line,
    needs_sequence,
    next_sequence,
    reduce,
    replay,
    rotate_if_needed,
    source_of,
)
from alpstore.continuity.paths import ExecutionPaths
from alpstore.errors import ContinuityError

T0 = datetime(2026, 9, 4, 12, 0, tzinfo=UTC)


@pytest.fixture
def paths(tmp_path: Path) -> ExecutionPaths:
    return ExecutionPaths.of(tmp_path / "alp", "exec_j")


def line(
    phase: str, payload: dict[str, Any] | bytes, *, runtime: str = "claude", sec: int = 0
) -> bytes:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return build_line(
        execution_id="exec_j",
        policy_hash="ph",
        runtime=runtime,
        phase=phase,
        source=source_of(runtime, data),
        now=T0 + timedelta(seconds=sec),
    )


def record(
    paths: ExecutionPaths,
    phase: str,
    prompt: str | None,
    *,
    sec: int = 0,
    session: str = "s",
    trigger: str = "auto",
) -> None:
    payload: dict[str, Any] = {"session_id": session, "trigger": trigger}
    if prompt is not None:
        payload["prompt_id"] = prompt
    append_line(paths, line(phase, payload, sec=sec))


def figures(paths: ExecutionPaths) -> tuple[int, str | None, str | None, int]:
    result = replay(paths)
    r = reduce(result.events)
    return (
        r.generation,
        r.pending.event_id if r.pending else None,
        r.last_completed.event_id if r.last_completed else None,
        result.dropped_lines,
    )


def test_line_envelope_is_exactly_alp_code() -> None:
    payload = {
        "session_id": "s1",
        "transcript_path": "/secret/t.jsonl",
        "cwd": "/w",
        "hook_event_name": "PostCompact",
        "trigger": "manual",
        "compact_summary": "x" * 30000,
        "prompt_id": "p" * 300,
        "model": 7,
        "agent_id": True,
        "agent_type": None,
        "custom_instructions": "keep",
        "permission_mode": "default",
        "turn_id": "t9",
    }
    raw = line("post", payload)
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1
    doc = json.loads(raw)
    assert list(doc) == ["v", "at", "executionId", "policyHash", "runtime", "phase", "source"]
    assert doc["at"] == "2026-09-04T12:00:00.000Z" and doc["phase"] == "post"
    assert doc["source"] == {
        "session_id": "s1",
        "trigger": "manual",
        "model": "7",
        "prompt_id": "p" * 256,
        "agent_id": "true",
    }
    assert raw.startswith(b'{"v":1,"at":"2026-09-04T12:00:00.000Z","executionId":"exec_j"')


def test_codex_keeps_turn_id_not_prompt_id() -> None:
    doc = json.loads(line("pre", {"turn_id": "t1", "prompt_id": "p1"}, runtime="codex"))
    assert doc["source"] == {"turn_id": "t1"}


@pytest.mark.parametrize("payload", [b"not json", b"", b"\xff\xfe", b"[1,2]", b'"str"'])
def test_garbage_payload_still_yields_a_line(payload: bytes) -> None:
    doc = json.loads(line("pre", payload))
    assert list(doc["source"]) == ["parseError"] and doc["source"]["parseError"]


def test_phase_comes_from_the_argument() -> None:
    doc = json.loads(line("pre", {"hook_event_name": "PostCompact"}))
    assert doc["phase"] == "pre"


def test_oversize_line_refused_nothing_written(paths: ExecutionPaths) -> None:
    with pytest.raises(ContinuityError, match="16 KiB"):
        build_line(
            execution_id="exec_" + "a" * 20000,
            policy_hash=None,
            runtime="claude",
            phase="pre",
            source={},
        )
    with pytest.raises(ContinuityError, match="16 KiB"):
        append_line(paths, b"x" * (20 * 1024) + b"\n")
    assert not paths.journal.exists()


def test_append_mode_0600(paths: ExecutionPaths) -> None:
    record(paths, "pre", "p1")
    assert stat.S_IMODE(os.stat(paths.journal).st_mode) == 0o600


def test_pre_then_post_is_one_generation(paths: ExecutionPaths) -> None:
    record(paths, "pre", "p1")
    record(paths, "post", "p1", sec=1)
    assert figures(paths) == (1, None, "p1", 0)


def test_torn_final_line_dropped_and_counted(paths: ExecutionPaths) -> None:
    record(paths, "pre", "p1")
    record(paths, "post", "p1", sec=1)
    with paths.journal.open("ab") as handle:
        handle.write(line("pre", {"session_id": "s", "prompt_id": "p2"})[:40])
    assert figures(paths) == (1, None, "p1", 1)
    # the next append is not glued onto the torn half: only the torn line is lost
    record(paths, "pre", "p3", sec=2)
    assert figures(paths) == (1, "p3", "p1", 1)


def test_rotated_pair_replays_dot_one_first(paths: ExecutionPaths) -> None:
    record(paths, "pre", "p1")
    assert rotate_if_needed(paths, at_bytes=1)
    assert paths.journal_rotated.exists() and not paths.journal.exists()
    record(paths, "post", "p1", sec=1)
    assert figures(paths) == (1, None, "p1", 0)


def test_rotation_threshold_and_replacement(paths: ExecutionPaths) -> None:
    record(paths, "pre", "old")
    rotate_if_needed(paths, at_bytes=1)
    record(paths, "pre", "p1")
    assert not rotate_if_needed(paths)  # far below 1 MiB
    assert rotate_if_needed(paths, at_bytes=1)  # replaces the older .1
    assert [e.event_id for e in replay(paths).events] == ["p1"]


def test_duplicates_merge_first(paths: ExecutionPaths) -> None:
    record(paths, "pre", "p1")
    record(paths, "pre", "p1", sec=5)  # hook re-run by the runtime
    record(paths, "post", "p1", sec=6)
    record(paths, "post", "p1", sec=7)
    result = replay(paths)
    reduction = reduce(result.events)
    assert (reduction.generation, reduction.pending, reduction.duplicates) == (1, None, 2)


def test_orphaned_pre_then_completed_pair(paths: ExecutionPaths) -> None:
    record(paths, "pre", "p1")  # abandoned compaction: never completed
    record(paths, "pre", "p2", sec=1)
    record(paths, "post", "p2", sec=2)
    assert figures(paths) == (1, None, "p2", 0)


def test_late_post_for_an_older_compaction(paths: ExecutionPaths) -> None:
    record(paths, "pre", "p1")
    record(paths, "pre", "p2", sec=1)
    record(paths, "post", "p1", sec=2)  # late: completes p1, p2 still pending
    assert figures(paths) == (1, "p2", "p1", 0)
    record(paths, "post", "p2", sec=3)
    assert figures(paths) == (2, None, "p2", 0)


def test_20_kib_line_in_the_file_is_dropped(paths: ExecutionPaths) -> None:
    record(paths, "pre", "p1")
    big = json.dumps(
        {
            "v": 1,
            "at": "x",
            "executionId": "exec_j",
            "policyHash": None,
            "runtime": "claude",
            "phase": "post",
            "source": {"pad": "z" * 20480},
        }
    )
    with paths.journal.open("a") as handle:
        handle.write(big + "\n")
    record(paths, "post", "p1", sec=1)
    assert figures(paths) == (1, None, "p1", 1)


@pytest.mark.parametrize(
    "bad",
    [
        b"{not json",
        b'{"v":2,"at":"x","executionId":"e","policyHash":null,"runtime":"claude","phase":"pre","source":{}}',
        b'{"v":1,"at":"x","executionId":"e","policyHash":null,"runtime":"gemini","phase":"pre","source":{}}',
        b'{"v":1,"at":"x","executionId":"e","policyHash":null,"runtime":"claude","phase":"mid","source":{}}',
        b'{"v":1,"at":"x","executionId":"e","policyHash":null,"runtime":"claude","phase":"pre","source":[]}',
        b"[]",
        b"\xff\xfe\xfd",
    ],
)
def test_off_schema_lines_counted(paths: ExecutionPaths, bad: bytes) -> None:
    record(paths, "pre", "p1")
    with paths.journal.open("ab") as handle:
        handle.write(bad + b"\n")
    record(paths, "post", "p1", sec=1)
    assert figures(paths) == (1, None, "p1", 1)


def test_trigger_normalised(paths: ExecutionPaths) -> None:
    record(paths, "pre", "p1", trigger="manual")
    record(paths, "pre", "p2", trigger="AUTO")
    append_line(paths, line("pre", b"garbage"))
    assert [e.trigger for e in replay(paths).events] == ["manual", "unknown", "unknown"]


def test_identity_falls_back_to_at_without_an_event_id(paths: ExecutionPaths) -> None:
    record(paths, "pre", None)
    record(paths, "pre", None, sec=1)
    events = replay(paths).events
    assert events[0].dedupe_key == "claude|s|2026-09-04T12:00:00.000Z|pre"
    assert reduce(events).duplicates == 0


def test_sequence_number_is_the_identity_when_present(paths: ExecutionPaths) -> None:
    paths.context_dir.mkdir(parents=True)
    base = {
        "v": 1,
        "executionId": "exec_j",
        "policyHash": None,
        "runtime": "codex",
        "source": {"session_id": "s", "turn_id": "t"},
    }
    lines = [
        {**base, "at": "a", "phase": "pre", "seq": 7},
        {**base, "at": "b", "phase": "post", "seq": 7},
    ]
    paths.journal.write_text("".join(json.dumps(d) + "\n" for d in lines))
    events = replay(paths).events
    assert events[1].dedupe_key == "codex|s|7|post"
    assert reduce(events).pending is None


@given(st.binary(max_size=4096), st.binary(max_size=4096))
def test_replay_never_raises_on_arbitrary_bytes(
    tmp_path_factory: Any, one: bytes, cur: bytes
) -> None:
    paths = ExecutionPaths.of(tmp_path_factory.mktemp("j"), "exec_fuzz")
    paths.context_dir.mkdir(parents=True)
    paths.journal_rotated.write_bytes(one)
    paths.journal.write_bytes(cur)
    result = replay(paths)
    reduce(result.events)
    nonblank = [x for x in (one + b"\n" + cur).split(b"\n") if x.strip()]
    assert len(result.events) + result.dropped_lines <= len(nonblank)


def hook_append(paths: ExecutionPaths, phase: str, payload: dict[str, Any], sec: int) -> None:
    """What `hook compact-record` does: a sequence number only when there is no event id."""
    source = source_of("claude", json.dumps(payload).encode())
    seq = next_sequence(paths, phase) if needs_sequence("claude", source) else None
    append_line(
        paths,
        build_line(
            execution_id="exec_j",
            policy_hash=None,
            runtime="claude",
            phase=phase,
            source=source,
            seq=seq,
            now=T0 + timedelta(seconds=sec),
        ),
    )


def test_sequence_pairs_real_claude_payloads_without_prompt_id(paths: ExecutionPaths) -> None:
    real = {"session_id": "s", "transcript_path": "/t", "cwd": "/w", "trigger": "auto"}
    hook_append(paths, "pre", real, 0)  # abandoned (Claude, 2026-09-04)
    hook_append(paths, "pre", real, 1)
    hook_append(paths, "post", real, 2)
    hook_append(paths, "post", real, 3)  # re-run by the runtime: merged
    docs = [json.loads(x) for x in paths.journal.read_text().splitlines()]
    assert [d["seq"] for d in docs] == [1, 2, 2, 2]
    assert list(docs[0]) == [
        "v",
        "at",
        "executionId",
        "policyHash",
        "runtime",
        "phase",
        "seq",
        "source",
    ]
    reduction = reduce(replay(paths).events)
    assert (reduction.generation, reduction.pending, reduction.duplicates) == (1, None, 1)
    rotate_if_needed(paths, at_bytes=1)  # the counter survives rotation
    hook_append(paths, "pre", real, 4)
    assert json.loads(paths.journal.read_text())["seq"] == 3
    assert reduce(replay(paths).events).pending is not None


def test_lines_with_an_event_id_carry_no_seq(paths: ExecutionPaths) -> None:
    hook_append(paths, "pre", {"session_id": "s", "prompt_id": "p1"}, 0)
    assert "seq" not in json.loads(paths.journal.read_text())
