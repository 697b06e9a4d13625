"""Bisect: the planted first-bad turn in ⌈log2 n⌉ + 1 hydrations; no guessing at the ends."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from alpstore.debug.bisect import bisect, exec_predicate, grep_predicate, max_hydrations
from alpstore.errors import UsageError
from tests.debug._debug_helpers import agent_session, open_store, simple_session

BAD_TURN = 637


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Any:
    store = open_store(tmp_path_factory.mktemp("bisect") / "run")
    session = agent_session(store, 1000, bad_turn=BAD_TURN, name="big")
    yield store, session
    store.close()


def test_finds_the_planted_turn_in_1000_within_the_bound(big: Any) -> None:
    store, session = big
    hydrations: list[Any] = []
    original = store.hydrate

    def counting(ck: Any, **kw: Any) -> Any:
        hydrations.append(ck.turn)
        return original(ck, **kw)

    store.hydrate = counting
    try:
        r = bisect(store, session, grep_predicate(r"rm -rf build/"))
    finally:
        del store.hydrate
    assert r.checkpoints == 1000
    assert r.first_bad.turn == BAD_TURN and r.last_good.turn == BAD_TURN - 1
    assert r.hydrations == len(hydrations) <= math.ceil(math.log2(1000)) + 1 == 11
    assert any("rm -rf" in str(e.value) for _, e in r.added)
    assert r.tested[0][0].turn == 1000


@pytest.mark.parametrize("bad", [2, 3, 17, 36, 37])
def test_every_position_of_a_small_session(tmp_path: Path, bad: int) -> None:
    with open_store(tmp_path / "run") as store:
        s = simple_session(store, 37, bad=bad)
        r = bisect(store, s, grep_predicate("BAD"))
        assert r.first_bad.turn == bad
        assert r.hydrations <= max_hydrations(37) == 7


def test_exec_predicate_reads_history_on_stdin(tmp_path: Path) -> None:
    with open_store(tmp_path / "run") as store:
        s = simple_session(store, 20, bad=11)
        r = bisect(store, s, exec_predicate("! grep -q BAD"))
        assert r.first_bad.turn == 11
        env = bisect(store, s, exec_predicate('test "$ALPSTORE_BISECT_TURN" -lt 5'))
        assert env.first_bad.turn == 5


def test_good_at_the_end_or_bad_at_the_start_is_an_error(tmp_path: Path) -> None:
    with open_store(tmp_path / "run") as store:
        s = simple_session(store, 8, bad=None)
        with pytest.raises(UsageError, match="good at the last checkpoint"):
            bisect(store, s, grep_predicate("BAD"))
        with pytest.raises(UsageError, match="already bad at the first checkpoint"):
            bisect(store, s, grep_predicate("q1"))
        one = simple_session(store, 1, name="one", bad=1)
        with pytest.raises(UsageError, match="already bad at the first"):
            bisect(store, one, grep_predicate("BAD"))


def test_failing_exec_reports_stderr_and_bad_regex(tmp_path: Path) -> None:
    with open_store(tmp_path / "run") as store:
        s = simple_session(store, 4, bad=2)
        with pytest.raises(UsageError, match=r"exited 127.*no-such-tool"):
            bisect(store, s, exec_predicate("no-such-tool-xyz"))
        with pytest.raises(UsageError, match=r"exited 125.*boom"):
            bisect(store, s, exec_predicate("echo boom >&2; exit 125"))
        with pytest.raises(UsageError, match="not a valid regular expression"):
            grep_predicate("(")
