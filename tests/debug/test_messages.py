"""The one message model (alpstore.rules.messages): every shape shows its tool calls."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from alpstore.rules.messages import message_line, render, shown

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)
KEYS = st.sampled_from(
    [
        "role",
        "type",
        "content",
        "tool_calls",
        "tool_call_id",
        "message",
        "name",
        "arguments",
        "input",
        "args",
        "function",
        "output",
        "summary",
        "text",
        "thinking",
        "id",
        "call_id",
    ]
)
SHAPED = st.recursive(
    JSON,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=6),
    max_leaves=40,
)


@settings(max_examples=400)
@given(SHAPED)
def test_any_json_renders_to_a_string(value: Any) -> None:
    role, text = render(value)
    assert isinstance(role, str) and isinstance(text, str)
    assert isinstance(message_line(value), str)
    assert "\n" not in message_line(value)


def test_langchain_ai_tool_calls_show_name_and_arguments() -> None:
    doc = {
        "lc": "ai",
        "role": "assistant",
        "content": "",
        "tool_calls": [{"name": "shell", "args": {"cmd": "rm -rf /tmp/x"}, "id": "c1"}],
    }
    assert render(doc) == ("assistant", 'calls shell({"cmd": "rm -rf /tmp/x"})')
    tool = {"lc": "tool", "role": "tool", "content": "done", "tool_call_id": "c1"}
    assert render(tool) == ("tool", "done")


def test_openai_chat_tool_calls() -> None:
    doc = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "ls", "arguments": '{"p": "."}'}}
        ],
    }
    assert render(doc) == ("assistant", 'calls ls({"p": "."})')


def test_claude_code_blocks() -> None:
    line = {
        "type": "assistant",
        "message": {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm"},
                {"type": "text", "text": "I'll clean up."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "Bash",
                    "input": {"command": "rm -rf build"},
                },
                {"type": "image", "source": {"data": "xx"}},
            ],
        },
    }
    role, text = render(line)
    assert role == "assistant"
    assert text == '(thinking: hmm) I\'ll clean up. [image] calls Bash({"command": "rm -rf build"})'
    s = shown(line)
    assert [(c.name, c.id) for c in s.calls] == [("Bash", "toolu_1")]
    result = {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": [{"type": "text", "text": "ok"}],
            }
        ],
    }
    assert render(result) == ("user", "result: ok")


def test_agents_sdk_items() -> None:
    assert render(
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]}
    ) == ("assistant", "hi")
    assert render(
        {"type": "function_call", "name": "f", "arguments": '{"a":1}', "call_id": "k"}
    ) == ("assistant", 'calls f({"a":1})')
    assert render({"type": "function_call_output", "call_id": "k", "output": "42"}) == (
        "tool",
        "result: 42",
    )
    assert render({"type": "reasoning", "summary": [{"type": "summary_text", "text": "why"}]}) == (
        "reasoning",
        "why",
    )


ROLES = st.sampled_from(["user", "assistant", "tool", "system", "", "x\ny"]) | st.text(max_size=6)
CHAT = st.fixed_dictionaries(
    {"role": ROLES},
    optional={
        "content": st.none() | st.text() | JSON,
        "tool_calls": JSON
        | st.lists(
            st.fixed_dictionaries(
                {"id": st.text(max_size=4)},
                optional={
                    "function": st.fixed_dictionaries(
                        {"name": st.text(max_size=5), "arguments": st.text(max_size=9) | JSON}
                    ),
                    "name": st.text(max_size=5),
                    "args": JSON,
                },
            ),
            max_size=3,
        ),
        "tool_call_id": st.text(max_size=4) | JSON,
        "type": st.sampled_from(["message", "function_call", "x"]),
        "message": JSON,
        "function_call": JSON,
        "name": st.text(max_size=5),
    },
)


@settings(max_examples=300)
@given(st.one_of(CHAT, SHAPED))
def test_the_plain_chat_shortcut_shows_what_the_general_reader_shows(value: Any) -> None:
    """``shown`` reads a plain chat message at a glance; every message shows as the general
    reader shows it."""
    from alpstore.rules.messages import _shown

    assert shown(value) == _shown(value)


@settings(max_examples=300)
@given(st.one_of(CHAT, SHAPED), st.integers(min_value=0, max_value=60))
def test_render_s_shortcut_gives_what_the_general_reader_gives(value: Any, width: int) -> None:
    """``render`` lines up a ``{role, content}`` message without building a ``Shown``; every
    message renders as the general reader shows it."""
    from alpstore.rules.messages import _shown

    general = _shown(value)
    assert render(value, width) == (general.role, general.line(width))


WHITESPACE = st.text(alphabet=st.sampled_from(" \t\n\r\x0b\x0c\x1c\u2028\u3000ab·é"), max_size=300)


@settings(max_examples=300)
@given(WHITESPACE | st.text(max_size=300), st.integers(min_value=0, max_value=40))
def test_a_cut_line_is_the_collapsed_text_cut(text: str, width: int) -> None:
    """Collapsing only the prefix a cut needs gives the whole text collapsed, then cut."""
    from alpstore.rules.messages import cut_line

    whole = " ".join(text.split())
    expected = whole[: width - 1] + "…" if width and len(whole) > width else whole
    assert cut_line(text, width) == expected


def test_render_cuts_at_the_width() -> None:
    long = {"role": "user", "content": "word " * 10_000}
    role, text = render(long, 20)
    assert role == "user" and text == ("word " * 4)[:19] + "…" and len(text) == 20
    assert render(long)[1] == " ".join(["word"] * 10_000)
