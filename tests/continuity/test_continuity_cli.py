"""The real `alpstore context …` and `alpstore hook …` commands, run as subprocesses."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ALPSTORE, Result, run_cli

EXEC = "exec_demo"
PRE_COMPACT = {
    "session_id": "4b3c1f0e-8d1a-4c52-9a57-2f1d3c0e9b11",
    "transcript_path": "/home/u/.claude/projects/p/4b3c.jsonl",
    "cwd": "/home/u/p",
    "hook_event_name": "PreCompact",
    "trigger": "auto",
    "custom_instructions": "",
}
POST_COMPACT = {**PRE_COMPACT, "hook_event_name": "PostCompact", "compact_summary": "S" * 30000}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "alp"


def cli(
    home: Path,
    *args: str,
    execution: str | None = EXEC,
    input: str | bytes | None = None,
    **env: str,
) -> Result:
    full = {"ALP_HOME": str(home), "ALP_COMPACT_BRIDGE": "", **env}
    full["ALP_EXECUTION_ID"] = execution or ""
    result = run_cli(*args, env=full, input=input)
    assert "Traceback" not in result.err
    return result


def context_dir(home: Path, execution: str = EXEC) -> Path:
    return home / "executions" / execution / "context"


def test_done_when(home: Path) -> None:
    pin = cli(home, "context", "pin", "decision", "--", "Use WAL")
    assert pin.code == 0, pin.err
    rendered = cli(home, "context", "render")
    assert rendered.code == 0
    assert "## Decisions\n\n- Use WAL" in rendered.out
    assert (context_dir(home) / "continuity.md").read_text() == rendered.out
    assert cli(home, "context", "validate", EXEC, execution=None).code == 0
    payload = '{"session_id":"s","trigger":"auto","prompt_id":"p1"}'
    for phase in ("pre", "post"):
        hook = cli(home, "hook", "compact-record", phase, "--runtime", "claude", input=payload)
        assert (hook.code, hook.err) == (0, "")
    status = cli(home, "context", "status")
    assert status.code == 0 and "generation 1, pending none" in status.out
    checkpoint = context_dir(home) / "checkpoint.json"
    checkpoint.write_text(checkpoint.read_text().replace("Use WAL", "Use WAX"))
    finding = cli(home, "context", "validate", EXEC, execution=None)
    assert finding.code == 13
    assert finding.err.startswith("alpstore: error: exec_demo: checkpoint.json: digest mismatch")
    assert cli(home, "context", "status").out.count("digest       mismatch") == 1


def test_pin_forms_sources_and_unpin(home: Path) -> None:
    out = cli(
        home,
        "context",
        "pin",
        "next-action",
        "--json",
        "--source",
        "agent",
        "--",
        "Run",
        "-k",
        "the tests",
    )
    assert out.code == 0, out.err
    pin = json.loads(out.out)
    assert (pin["text"], pin["source"], pin["kind"]) == ("Run -k the tests", "agent", "next-action")
    doc = json.loads((context_dir(home) / "checkpoint.json").read_text())
    assert doc["objective"] is None and doc["nextActions"][0]["id"] == pin["id"]
    assert cli(home, "context", "unpin", pin["id"]).code == 0
    again = cli(home, "context", "unpin", pin["id"])
    assert again.code == 12 and again.err.count("\n") <= 2


@pytest.mark.parametrize(
    ("args", "execution", "code", "message"),
    [
        (("context", "pin", "idea", "--", "x"), EXEC, 12, "unknown pin kind"),
        (("context", "pin", "decision", "--", " \n "), EXEC, 12, "needs text"),
        (("context", "pin", "decision", "--", "x"), "bad id", 12, "not valid"),
        (("context", "pin", "decision", "--", "x"), None, 2, "no execution"),
        (("context", "status"), None, 2, "no execution"),
        (("context", "render"), EXEC, 12, "no checkpoint"),
        (("context", "validate", "exec_missing"), None, 13, "no checkpoint.json"),
        (("context", "pin", "decision", "--source", "boss", "--", "x"), EXEC, 12, "source"),
    ],
)
def test_bad_input_is_one_line_and_an_exit_code(
    home: Path, args: tuple[str, ...], execution: str | None, code: int, message: str
) -> None:
    result = cli(home, *args, execution=execution)
    assert result.code == code
    assert result.err.startswith("alpstore: error:") and message in result.err


def test_oversize_pin_cut_at_the_cli_or_refused_with_strict(home: Path) -> None:
    big = "é" * 3000
    strict = cli(home, "context", "pin", "decision", "--strict", "--", big)
    assert strict.code == 12 and not (context_dir(home) / "checkpoint.json").exists()
    cut = cli(home, "context", "pin", "decision", "--json", "--", big)
    assert cut.code == 0 and "cut to 4 KiB" in cut.err
    assert len(json.loads(cut.out)["text"].encode()) == 4096


def test_validate_policy_binding_and_prepare(home: Path) -> None:
    prep = cli(home, "context", "prepare", "exec_p", "--policy-hash", "h1", "--task", "Ship it")
    assert prep.code == 0, prep.err
    assert cli(home, "context", "validate", "exec_p", "--policy-hash", "h1").code == 0
    wrong = cli(home, "context", "validate", "exec_p", "--policy-hash", "h2")
    assert wrong.code == 13 and "bound to policy h1" in wrong.err
    assert cli(home, "context", "prepare", "exec_p", "--policy-hash", "h2").code == 12


def test_settle_then_seed_the_next_root(home: Path) -> None:
    assert (
        cli(home, "context", "prepare", "exec_r1", "--policy-hash", "h", "--task", "T1").code == 0
    )
    assert cli(home, "context", "pin", "-x", "exec_r1", "constraint", "--", "No new deps").code == 0
    first = cli(home, "context", "settle", "exec_r1", "--thread", "th1")
    second = cli(home, "context", "settle", "exec_r1", "--thread", "th1")
    assert "rev 1" in first.out and "rev 2" in second.out
    revs = home / "threads" / "th1" / "context"
    assert (revs / "1.json").read_bytes() == (revs / "2.json").read_bytes()
    prep = cli(
        home,
        "context",
        "prepare",
        "exec_r2",
        "--policy-hash",
        "h",
        "--task",
        "<interactive>",
        "--thread",
        "th1",
    )
    assert prep.code == 0 and "1 pin(s) from thread th1" in prep.out
    rendered = cli(home, "context", "render", "exec_r2")
    assert "## Objective" not in rendered.out and "- No new deps" in rendered.out


def test_status_json_and_dropped_lines(home: Path) -> None:
    cli(home, "context", "pin", "decision", "--", "Use WAL")
    cli(home, "hook", "compact-record", "pre", input=json.dumps(PRE_COMPACT))
    with (context_dir(home) / "compact-events.jsonl").open("a") as handle:
        handle.write('{"v":1,"at":"torn')
    report = json.loads(cli(home, "context", "status", "--json").out)
    assert report["digest"] == "ok" and report["pins"]["decisions"] == 1
    assert report["sizes"]["checkpointLimit"] == 131072 and report["sizes"]["renderLimit"] == 24576
    journal = report["journal"]
    assert (journal["generation"], journal["droppedLines"]) == (0, 1)
    assert journal["pending"]["trigger"] == "auto"


def test_status_rotates_a_full_journal(home: Path) -> None:
    cli(home, "hook", "compact-record", "pre", input=json.dumps(PRE_COMPACT))
    journal = context_dir(home) / "compact-events.jsonl"
    line = journal.read_bytes()
    journal.write_bytes(line * (1024 * 1024 // len(line) + 1))
    report = json.loads(cli(home, "context", "status", "--json").out)
    assert report["journal"]["rotated"] and not journal.exists()
    assert (context_dir(home) / "compact-events.jsonl.1").exists()
    assert report["journal"]["duplicates"] > 0 and report["digest"] == "missing"


def test_hook_records_real_claude_payloads(home: Path) -> None:
    cli(home, "context", "prepare", EXEC, "--policy-hash", "h9", execution=None)
    assert (
        cli(
            home,
            "hook",
            "compact-record",
            "pre",
            "--runtime",
            "claude",
            input=json.dumps(PRE_COMPACT),
        ).code
        == 0
    )
    assert (
        cli(
            home,
            "hook",
            "compact-record",
            "post",
            "--runtime",
            "claude",
            input=json.dumps(POST_COMPACT),
        ).code
        == 0
    )
    lines = (context_dir(home) / "compact-events.jsonl").read_text().splitlines()
    docs = [json.loads(x) for x in lines]
    assert [d["phase"] for d in docs] == ["pre", "post"]
    assert all(d["policyHash"] == "h9" for d in docs)
    assert "compact_summary" not in lines[1] and "transcript_path" not in lines[1]
    assert len(lines[1]) < 1024
    status = cli(home, "context", "status")
    assert "generation 1, pending none" in status.out


@pytest.mark.parametrize(
    ("args", "execution", "stdin", "recorded"),
    [
        (("pre",), EXEC, b"\x00garbage{", True),
        (("pre", "--runtime", "gemini"), EXEC, b"{}", False),
        (("sideways",), EXEC, b"{}", False),
        (("pre",), None, b"{}", False),
        (("pre",), "not-an-exec", b"{}", False),
    ],
)
def test_compact_record_never_fails_the_runtime(
    home: Path, args: tuple[str, ...], execution: str | None, stdin: bytes, recorded: bool
) -> None:
    result = cli(home, "hook", "compact-record", *args, execution=execution, input=stdin)
    assert result.code == 0 and result.out == ""
    journal = context_dir(home) / "compact-events.jsonl"
    assert journal.exists() is recorded
    if recorded:
        assert "parseError" in json.loads(journal.read_text())["source"]
    else:
        assert result.err.startswith("alpstore: hook")


@pytest.mark.parametrize(
    ("source", "injects"),
    [("compact", True), ("resume", True), ("startup", False), ("clear", False)],
)
def test_session_start_reinjects_after_compact_and_resume(
    home: Path, source: str, injects: bool
) -> None:
    cli(home, "context", "pin", "decision", "--", "Use WAL")
    payload = {
        "session_id": "s",
        "transcript_path": "/t",
        "cwd": "/w",
        "hook_event_name": "SessionStart",
        "source": source,
    }
    result = cli(home, "hook", "session-start", input=json.dumps(payload))
    assert result.code == 0
    if injects:
        out = json.loads(result.out)["hookSpecificOutput"]
        assert out["hookEventName"] == "SessionStart"
        assert "## Decisions\n\n- Use WAL" in out["additionalContext"]
    else:
        assert result.out == ""


@pytest.mark.parametrize("stdin", [b"", b"nonsense", b'{"source":"compact"}'])
def test_session_start_tolerates_garbage_and_missing_state(home: Path, stdin: bytes) -> None:
    result = cli(home, "hook", "session-start", input=stdin)
    assert (result.code, result.out) == (0, "")


def test_session_start_with_tampered_checkpoint_injects_nothing(home: Path) -> None:
    cli(home, "context", "pin", "decision", "--", "Use WAL")
    checkpoint = context_dir(home) / "checkpoint.json"
    checkpoint.write_text(checkpoint.read_text().replace("WAL", "LAW"))
    result = cli(home, "hook", "session-start", input='{"source":"compact"}')
    assert (result.code, result.out) == (0, "") and "digest mismatch" in result.err


def test_hook_install_and_uninstall(home: Path, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    plain = cli(home, "hook", "install", "--project", str(project))
    assert plain.code == 0 and "ALP_COMPACT_BRIDGE=1" in plain.err
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    assert set(settings["hooks"]) == {"SessionStart"}
    bridged = cli(home, "hook", "install", "--project", str(project), ALP_COMPACT_BRIDGE="1")
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    assert bridged.code == 0 and set(settings["hooks"]) == {
        "SessionStart",
        "PreCompact",
        "PostCompact",
    }
    assert settings["hooks"]["PreCompact"][0]["hooks"][0]["command"] == (
        "alpstore hook compact-record pre --runtime claude"
    )
    removed = cli(home, "hook", "uninstall", "--project", str(project))
    assert "removed 4" in removed.out
    assert json.loads((project / ".claude" / "settings.json").read_text()) == {}


def test_two_pin_processes_race_and_lose_nothing(home: Path) -> None:
    env = {"ALP_HOME": str(home), "ALP_EXECUTION_ID": "exec_race", "PATH": "/usr/bin:/bin"}
    procs = [
        subprocess.Popen(
            [ALPSTORE, "context", "pin", "open-item", "--", f"item {i}"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for i in range(12)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * 12
    report = json.loads(cli(home, "context", "status", "--json", execution="exec_race").out)
    assert report["pins"]["openItems"] == 12 and report["digest"] == "ok"


@pytest.mark.parametrize(
    "command",
    [
        ("context",),
        ("context", "prepare"),
        ("context", "pin"),
        ("context", "unpin"),
        ("context", "render"),
        ("context", "status"),
        ("context", "validate"),
        ("context", "settle"),
        ("hook",),
        ("hook", "compact-record"),
        ("hook", "session-start"),
        ("hook", "install"),
        ("hook", "uninstall"),
    ],
)
def test_every_command_has_help(home: Path, command: tuple[str, ...]) -> None:
    result = cli(home, *command, "--help")
    assert result.code == 0 and "Usage" in result.out
    assert len(result.out.strip().splitlines()) > 3
