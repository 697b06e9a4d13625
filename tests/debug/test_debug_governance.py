"""backtrack_on_error (BT-2): tables for every on_cap_reached value and the threshold edges."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from alpstore.debug.governance import (
    BacktrackOnError,
    ErrorRecovery,
    apply_cap_action,
    error_signature,
)
from alpstore.errors import PolicyError
from alpstore.store import Store
from tests.backend_pass import suite_backend
from tests.conftest import run_cli
from tests.debug._debug_helpers import open_store, simple_session


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = open_store(tmp_path / "run")
    yield s
    s.close()


E = "RuntimeError: tool bash failed"
F = "ValueError: bad json"

# (threshold, cap, on_cap, errors ('ok' = a successful turn), expected actions)
TABLE = [
    (1, 3, "hitl", [E], ["backtrack"]),
    (1, 1, "hitl", [E, E], ["backtrack", "hitl"]),
    (2, 3, "hitl", [E], ["retry"]),
    (2, 3, "hitl", [E, E], ["retry", "backtrack"]),
    (2, 3, "hitl", [E, F, E], ["retry", "retry", "retry"]),
    (2, 3, "hitl", [E, "ok", E], ["retry", "retry"]),
    (3, 3, "hitl", [E, E, E], ["retry", "retry", "backtrack"]),
    (2, 1, "hitl", [E, E, E, E, E], ["retry", "backtrack", "retry", "hitl", "hitl"]),
    (2, 1, "terminate", [E, E, E, E], ["retry", "backtrack", "retry", "terminate"]),
    (
        2,
        1,
        "stop_backtracking",
        [E, E, E, E, E, F],
        ["retry", "backtrack", "retry", "stop_backtracking", "propagate", "propagate"],
    ),
    (
        2,
        3,
        "hitl",
        [E] * 8,
        ["retry", "backtrack", "retry", "backtrack", "retry", "backtrack", "retry", "hitl"],
    ),
]


@pytest.mark.parametrize(("threshold", "cap", "on_cap", "errors", "expected"), TABLE)
def test_decision_table(
    store: Store, threshold: int, cap: int, on_cap: str, errors: list[str], expected: list[str]
) -> None:
    s = simple_session(store, 12)
    policy = BacktrackOnError(threshold, cap, 1, on_cap)  # type: ignore[arg-type]
    gov = ErrorRecovery(s, policy)
    actions = []
    for err in errors:
        if err == "ok":
            gov.on_success()
            continue
        actions.append(gov.on_error(err).action)
    assert actions == expected
    backtracks = store.session_backtracks(s.id)
    assert len(backtracks) == actions.count("backtrack")
    assert all(bt["automatic"] and bt["steering"].startswith("/steer ") for bt in backtracks)
    assert s.info().backtrack_count == actions.count("backtrack")
    recorded = [
        e["detail"]["action"] for e in store.session_events(s.id) if e["kind"] == "recovery"
    ]
    assert recorded == actions


def test_backtrack_rewinds_steps_and_steers(store: Store) -> None:
    s = simple_session(store, 10)
    gov = ErrorRecovery(s, BacktrackOnError(repeat_threshold=1, steps=3))
    d = gov.on_error(RuntimeError("connection reset after 12 ms"))
    assert d.action == "backtrack" and d.to_turn == 7 and d.backtrack_count == 1
    last = s.history()[-1].value
    assert last["role"] == "user" and last["content"].startswith("/steer ")
    assert "RuntimeError: connection reset after # ms" in last["content"]
    assert store.session_backtracks(s.id)[0]["error_signature"] == d.signature


def test_cap_is_persisted_and_stop_survives_a_new_process(store: Store) -> None:
    s = simple_session(store, 10)
    policy = BacktrackOnError(repeat_threshold=1, max_backtracks_per_session=2)
    first = ErrorRecovery(s, policy)
    assert [first.on_error(E).action for _ in range(2)] == ["backtrack", "backtrack"]
    again = ErrorRecovery(store.get_session("s"), policy)
    assert again.on_error(E).action == "hitl"
    stop = BacktrackOnError(
        repeat_threshold=1, max_backtracks_per_session=2, on_cap_reached="stop_backtracking"
    )
    assert ErrorRecovery(s, stop).on_error(E).action == "stop_backtracking"
    assert ErrorRecovery(store.get_session("s"), stop).on_error(F).action == "propagate"


def test_too_short_history_escalates_instead_of_guessing(store: Store) -> None:
    s = simple_session(store, 1)
    d = ErrorRecovery(s, BacktrackOnError(repeat_threshold=1, steps=1)).on_error(E)
    assert d.action == "hitl" and d.reason.startswith("cannot backtrack")
    assert store.session_backtracks(s.id) == []


@pytest.mark.parametrize(
    ("action", "status"),
    [("hitl", "paused"), ("terminate", "terminated"), ("stop_backtracking", "active")],
)
def test_apply_cap_action(store: Store, action: str, status: str) -> None:
    s = simple_session(store, 3)
    policy = BacktrackOnError(
        repeat_threshold=1, max_backtracks_per_session=1, on_cap_reached=action
    )  # type: ignore[arg-type]
    gov = ErrorRecovery(s, policy)
    gov.on_error(E)
    d = gov.on_error(E)
    assert d.cap_reached and d.action == action
    apply_cap_action(s, d)
    assert s.info().status == status


def test_signatures_mask_volatile_parts() -> None:
    a = error_signature(TimeoutError("call 0x7f3a2b after 30s (req 3f9a0c11d2)"))
    b = error_signature(TimeoutError("call 0x7e0000 after 45s (req 99aa0c11ff)"))
    assert a == b and a.startswith("TimeoutError: ")
    assert error_signature("x" * 500) != error_signature("x" * 499 + "y")
    assert len(error_signature("x" * 500)) <= 200
    assert error_signature(ValueError("a")) != error_signature(KeyError("a"))


def test_binding_from_manifest_and_strict_parsing() -> None:
    manifest = {
        "spec": {
            "governance": [
                {"other": {"error_recovery_plugin": "something_else"}},
                {
                    "sample": {
                        "error_recovery_plugin": "backtrack_on_error",
                        "backtrack": {
                            "repeat_threshold": 2,
                            "max_backtracks_per_session": 3,
                            "steps": 1,
                            "on_cap_reached": "hitl",
                        },
                    }
                },
            ]
        }
    }
    assert BacktrackOnError.from_manifest(manifest) == BacktrackOnError()
    assert BacktrackOnError.from_manifest({"spec": {}}) is None
    assert BacktrackOnError.from_mapping({}).max_backtracks_per_session == 3
    for bad, where in [
        ({"repeat_treshold": 2}, "repeat_treshold: unknown key"),
        ({"steps": 0}, "steps"),
        ({"steps": True}, "steps"),
        ({"max_backtracks_per_session": "3"}, "max_backtracks_per_session"),
        ({"on_cap_reached": "ask"}, "on_cap_reached"),
    ]:
        with pytest.raises(PolicyError, match=where):
            BacktrackOnError.from_mapping(bad)


def test_decisions_show_in_sql_and_session_log(tmp_path: Path) -> None:
    root = tmp_path / "run"
    with open_store(root) as st:
        s = simple_session(st, 5, name="gov")
        gov = ErrorRecovery(s, BacktrackOnError())
        gov.on_error(E)
        gov.on_error(E)
    action = (  # the archive is plain SQL in either dialect
        "json_extract(detail, '$.action')"
        if suite_backend() == "sqlite"
        else "cast(detail as json) ->> 'action'"
    )
    sql = run_cli(
        "--root",
        str(root),
        "sql",
        f"select kind, {action} from session_events where kind = 'recovery' order by id",
    )
    assert sql.code == 0, sql.err
    assert "retry" in sql.out and "backtrack" in sql.out
    log = run_cli("--root", str(root), "session", "log", "gov")
    assert log.code == 0, log.err
    assert "recovery" in log.out and "(automatic)" in log.out
    dlog = run_cli("--root", str(root), "debug", "log", "gov")
    assert "! recovery: retry" in dlog.out and "! recovery: backtrack" in dlog.out
