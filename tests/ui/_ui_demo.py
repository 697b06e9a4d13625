"""A demo-like archive for the inspector's tests: a coding-agent session with a fold, a
backtrack with a steering message, a recovery decision and a fork, plus a hostile transcript."""

from __future__ import annotations

from typing import Any

from alpstore.samples import generate
from alpstore.store import Store
from tests.debug._debug_helpers import turns_of

STEERING = "Ask before deleting anything."
SUMMARY = "Setup and first fixes <b>folded</b>"
BAD = "rm -rf build/"

XSS_MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "<script>window.__pwned = 1</script>please look"},
    {
        "role": "assistant",
        "content": '<img src=x onerror="window.__pwned = 2"> and <a href="javascript:window.'
        '__pwned=3">click me</a> and [md](javascript:window.__pwned=4)',
        "tool_calls": [
            {
                "id": "call_<b>1</b>",
                "type": "function",
                "function": {"name": "<svg onload=alert(5)>", "arguments": '{"x": "</pre><i>"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_<b>1</b>", "content": "\x1b[31mred\x1b[0m \u202eevil"},
    {"role": "<script>alert(6)</script>", "content": "odd role"},
]


def build_demo(store: Store, turns: int = 40) -> dict[str, Any]:
    """Fill ``store``; returns the names and ids the tests look for."""
    demo = store.create_session(name="demo")
    for turn in turns_of(list(generate(turns, bad_turn=turns - 8))):
        demo.commit_turn(turn, kernel={"q": {}, "turn": len(turn)})
    demo.fold(1, 21, SUMMARY)
    folded = demo.checkpoint(label="after-fold", kernel={"q": {}, "folded": True})
    demo.commit_turn([{"role": "user", "content": "Run the whole test suite."}])
    bt = demo.backtrack(2, STEERING)
    demo.commit_turn(
        [{"role": "assistant", "content": "Understood: I will ask before deleting files."}]
    )
    demo.record_decision(
        "recovery",
        {"action": "retry", "reason": "occurrence 1 of 2", "signature": "TimeoutError"},
    )
    fork_point = store.resolve_checkpoint("demo@20")
    child = demo.fork(fork_point, name="experiment")
    child.commit_turn([{"role": "user", "content": "Try the other approach from here."}])
    live = store.create_session(name="live")
    live.commit_turn([{"role": "user", "content": "first"}])
    xss = store.create_session(name="xss<b>bold</b>")
    xss.commit_turn(XSS_MESSAGES, label="<i>label</i>")
    return {
        "demo": demo.uuid,
        "child": child.uuid,
        "xss": xss.uuid,
        "live": live.uuid,
        "bad_turn": turns - 8,
        "folded": folded.id,
        "backtrack_to": bt.to_checkpoint.id,
    }
