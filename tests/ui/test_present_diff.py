"""The inspector's text diff (``present.text_diff``): the lines two bodies share at the start
and end are set aside before difflib runs, which must change nothing in what a page shows,
and a pair of long bodies is compared in bounded time."""

from __future__ import annotations

import re
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from alpstore.sessions import Entry
from alpstore.ui.present import MAX_DIFF_INPUT, text_diff


def entry(lines: list[str]) -> Entry:
    return Entry(b"\0" * 32, "message", {"role": "assistant", "content": "\n".join(lines)})


def patched(left: list[str], diff: list[tuple[str, str]]) -> list[str]:
    """``left`` with the diff's hunks applied (their headers give the old bodies' lines)."""
    out: list[str] = []
    at = 0  # lines of left consumed
    for tag, line in diff:
        if tag == "@":
            m = re.match(r"@@ -(\d+)(?:,(\d+))? ", line)
            assert m is not None, line
            first = int(m.group(1)) - (0 if m.group(2) == "0" else 1)
            out += left[at:first]
            at = first
        elif tag == "+":
            out.append(line)
        else:
            assert left[at] == line, (at, line)
            at += 1
            if tag == " ":
                out.append(line)
    return out + left[at:]


lines = st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), max_size=40)


@settings(max_examples=300, deadline=None)
@given(left=lines, right=lines, shared_head=st.integers(0, 30), shared_tail=st.integers(0, 30))
def test_setting_aside_the_shared_ends_changes_nothing(
    left: list[str], right: list[str], shared_head: int, shared_tail: int
) -> None:
    head = [f"h{i}" for i in range(shared_head)]
    tail = [f"t{i}" for i in range(shared_tail)]
    a, b = [*head, *left, *tail], [*head, *right, *tail]
    diff = text_diff(entry(a), entry(b))
    assert patched(["role: assistant", *a], diff) == ["role: assistant", *b]
    assert (diff == []) == (a == b)
    changed = sum(1 for tag, _ in diff if tag in "+-")
    assert changed <= len(left) + len(right)  # the shared ends are never shown as changed


def test_two_long_bodies_are_compared_in_bounded_time() -> None:
    n = 20_000
    a = [f"line {i}" for i in range(n)]
    b = [f"line {i}" if i % 2 else f"changed {i}" for i in range(n)]
    start = time.process_time()
    out = text_diff(entry(a), entry(b))
    assert time.process_time() - start < 2  # 17 s of difflib before
    assert out[-1] == ("@", "… (diff cut)")
    one_change = [*a[:15_000], "new", *a[15_001:]]
    out = text_diff(entry(a), entry(one_change))
    assert ("-", "line 14999") not in out and ("+", "new") in out and ("-", "line 15000") in out
    assert out[0] == ("@", "@@ -15000,5 +15000,5 @@")  # the bodies' own line numbers
    middle = [f"m{i}" for i in range(3 * MAX_DIFF_INPUT)]
    other = ["first", *middle[1:-1], "last"]  # differ at both ends of a long middle
    out = text_diff(entry(["h", *middle, "t"]), entry(["h", *other, "t"]))
    assert ("-", "m0") in out and ("+", "first") in out and ("+", "last") not in out
    assert out[-1][0] == "@" and f"compared {MAX_DIFF_INPUT:,} of the" in out[-1][1]
