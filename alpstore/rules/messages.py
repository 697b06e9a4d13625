"""One message model for display and search: what ``session show``, the ``debug`` commands and
the inspector print for a stored message, and what ``--grep`` searches.

It reads the shapes alpstore stores: OpenAI chat messages (``tool_calls``, ``tool_call_id``),
Anthropic / Claude Code content blocks (``text``, ``tool_use``, ``tool_result``, ``thinking``,
images as a placeholder; a transcript line's ``message`` inside), LangChain messages as the
LangGraph saver stores them (``tool_calls`` of ``name``/``args``, content lists, ``lc``) and
Agents SDK items (``message`` with ``output_text``, ``function_call``,
``function_call_output``, ``reasoning``). Any JSON value renders to a string, never raises.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

_MAX_DEPTH = 20
"""Nested tool results deeper than this are shown as JSON."""

_TEXT_BLOCKS = frozenset({"text", "output_text", "input_text", "summary_text", "refusal"})
_IMAGE_BLOCKS = frozenset({"image", "image_url", "input_image", "output_image"})


TOO_DEEP = "(nested too deeply to show here: `alpstore sql` reads it as JSON)"
"""What a value nested deeper than the encoder's stack shows as."""


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):  # odd keys: still a string
        return _repr(value)
    except RecursionError:  # the store takes what its writer's stack allowed
        return TOO_DEEP


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except RecursionError:
        return TOO_DEEP


def _args(value: Any) -> str:
    """Tool-call arguments as shown: a string as stored (OpenAI's JSON text), else JSON."""
    return value if isinstance(value, str) else _json(value if value is not None else {})


@dataclass(frozen=True)
class Call:
    """A tool call: its name, its arguments as shown, its id (or "")."""

    name: str
    arguments: str
    id: str = ""

    def __str__(self) -> str:
        return f"{self.name}({self.arguments})"


def _call(name: Any, arguments: Any, ident: Any = "") -> Call:
    return Call(
        name if isinstance(name, str) and name else "?",
        _args(arguments),
        ident if isinstance(ident, str) else _json(ident),
    )


def tool_call(name: Any, arguments: Any) -> str:
    """``name(arguments)``: how a tool call is shown."""
    return str(_call(name, arguments))


def _calls(calls: Any) -> list[Call]:
    out = []
    for c in calls if isinstance(calls, list) else []:
        if not isinstance(c, dict):
            out.append(_call("?", c))
        elif isinstance(c.get("function"), dict):  # OpenAI chat
            fn = c["function"]
            out.append(_call(fn.get("name"), fn.get("arguments"), c.get("id", "")))
        else:  # LangChain: name / args
            out.append(_call(c.get("name"), c.get("args", c.get("arguments")), c.get("id", "")))
    return out


@dataclass
class Shown:
    """A message as shown: its role, its text (tool calls apart) and its tool calls."""

    role: str
    text: str
    calls: list[Call] = field(default_factory=list)
    tool_call_id: str | None = None

    def line(self, width: int = 0) -> str:
        """The text with each call as ``calls name(arguments)``, one line, its whitespace
        collapsed; longer than ``width`` (when not 0), cut to ``width`` ending in ``…``.
        """
        parts = [self.text, *(f"calls {c}" for c in self.calls)]
        return cut_line(" ".join(p for p in parts if p), width)


def cut_line(text: str, width: int = 0) -> str:
    """``text`` on one line (whitespace runs become one space), cut to ``width`` characters
    ending in ``…`` when longer (``width`` 0: never cut).

    Only as much of a long text is collapsed as the cut needs: the collapsed prefix of a text
    is a prefix of the collapsed text.
    """
    if width > 0:
        n = 4 * width + 64
        while n < len(text):
            head = " ".join(text[:n].split())
            if len(head) > width:
                return head[: width - 1] + "…"
            n *= 4
    whole = " ".join(text.split())
    return whole[: width - 1] + "…" if 0 < width < len(whole) else whole


def _block(block: Any, depth: int, calls: list[Call] | None = None) -> str:
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return _json(block)
    kind = block.get("type")
    kind = kind if isinstance(kind, str) else ""
    if kind in _TEXT_BLOCKS and isinstance(block.get("text", block.get("refusal")), str):
        return str(block.get("text", block.get("refusal")))
    if kind in ("tool_use", "server_tool_use", "function_call", "tool_call"):
        args = block.get("input", block.get("arguments", block.get("args")))
        found = _call(block.get("name"), args, block.get("id", block.get("call_id", "")))
        if calls is None:
            return f"calls {found}"
        calls.append(found)
        return ""
    if kind == "tool_result":
        body = content_text(block.get("content"), depth + 1)
        flag = " (error)" if block.get("is_error") else ""
        return f"result{flag}: {body}"
    if kind in ("thinking", "reasoning", "redacted_thinking"):
        inner = block.get("thinking", block.get("reasoning", block.get("summary", "")))
        return f"(thinking: {content_text(inner, depth + 1)})"
    if kind in _IMAGE_BLOCKS:
        return "[image]"
    if kind == "document" or kind == "file":
        return f"[{kind}]"
    return _json(block)


def content_text(content: Any, depth: int = 0, calls: list[Call] | None = None) -> str:
    """A message's content as text: a string as itself, a list of blocks each shown (tool-use
    blocks go to ``calls`` when given, else inline as ``calls name(arguments)``).
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if depth > _MAX_DEPTH:
        return _json(content)
    if isinstance(content, list):
        return " ".join(t for t in (_block(b, depth, calls) for b in content) if t)
    if isinstance(content, dict):
        return _block(content, depth, calls)
    return _json(content)


def _agents_item(v: dict[str, Any]) -> Shown | None:
    kind = v.get("type") if isinstance(v.get("type"), str) else ""
    if kind == "function_call":
        call = _call(v.get("name"), v.get("arguments"), v.get("call_id", v.get("id", "")))
        return Shown("assistant", "", [call])
    if kind == "custom_tool_call":  # Codex: a freeform tool (apply_patch) and its input
        call = _call(v.get("name"), v.get("input"), v.get("call_id", v.get("id", "")))
        return Shown("assistant", "", [call])
    if kind == "local_shell_call":  # Codex: a shell command the model ran
        action = v.get("action")
        args = action.get("command") if isinstance(action, dict) else action
        return Shown("assistant", "", [_call("local_shell", args, v.get("call_id", ""))])
    if kind in ("function_call_output", "custom_tool_call_output"):
        out = v.get("output")
        ident = v.get("call_id")
        text = f"result: {out if isinstance(out, str) else content_text(out)}"
        return Shown("tool", text, [], ident if isinstance(ident, str) else None)
    if kind == "reasoning":
        summary = v.get("summary") or v.get("content") or ""
        return Shown("reasoning", content_text(summary))
    if kind == "message" and "role" in v:
        calls: list[Call] = []
        text = content_text(v.get("content"), 0, calls)
        return Shown(str(v["role"]), text, calls)
    return None


def _plain_chat(v: dict[str, Any]) -> Shown | None:
    """The common case, at a glance: a chat message with a role and text (or none), perhaps
    OpenAI ``tool_calls``. None for every other shape (:func:`_shown` reads those); for this
    one it gives what :func:`_shown` gives.
    """
    role = v.get("role")
    if type(role) is not str or not role or "type" in v or "message" in v:
        return None
    content = v.get("content")
    if content is not None and type(content) is not str:
        return None
    if "function_call" in v:
        return None
    ident = v.get("tool_call_id")
    return Shown(
        role,
        content or "",
        _calls(v.get("tool_calls")),
        ident if isinstance(ident, str) else None,
    )


def shown(message: Any) -> Shown:
    """How a stored message is shown: role, text and tool calls (names and arguments).
    Total: any JSON value gives one.
    """
    if type(message) is dict:
        plain = _plain_chat(message)
        if plain is not None:
            return plain
    return _shown(message)


def _shown(message: Any) -> Shown:
    if not isinstance(message, dict):
        text = content_text(message) if isinstance(message, list) else _json(message)
        return Shown("value", text)
    v = message
    inner = v.get("message")
    if isinstance(inner, dict) and "content" not in v:  # a Claude Code transcript line
        role = inner.get("role") or v.get("type") or "?"
        v = {**inner, "role": role}
    item = _agents_item(v)
    if item is not None:
        return item
    role = v.get("role") or v.get("type") or "?"
    calls: list[Call] = []
    text = content_text(v.get("content"), 0, calls)
    calls.extend(_calls(v.get("tool_calls")))
    fn = v.get("function_call")
    if isinstance(fn, dict):  # legacy OpenAI
        calls.append(_call(fn.get("name"), fn.get("arguments")))
    ident = v.get("tool_call_id")
    return Shown(
        role if isinstance(role, str) else _json(role),
        text,
        calls,
        ident if isinstance(ident, str) else None,
    )


def render(message: Any, width: int = 0) -> tuple[str, str]:
    """``(role, text)`` of a stored message on one line, tool calls as
    ``calls name(arguments)`` after the text; the text cut at ``width`` (0: whole).
    """
    if type(message) is dict and len(message) <= 3:  # the commonest shape, at a glance
        role = message.get("role")
        content = message.get("content")
        if (
            type(role) is str
            and role
            and type(content) is str
            and len(message) == 2 + ("name" in message)
        ):
            return role, cut_line(content, width)
    s = shown(message)
    return s.role, s.line(width)


def message_line(message: Any) -> str:
    """``role: text`` on one line: what ``--grep`` searches."""
    role, text = render(message)
    return f"{role}: {text}"
