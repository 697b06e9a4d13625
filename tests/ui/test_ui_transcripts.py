"""The inspector over imported Claude Code transcripts (issue 43): the timeline marks each
rewind as a backtrack with the abandoned branch's checkpoints cut, each compaction as a fold
whose summary opens onto the raw entries, each subagent as a child session; the sessions page
nests the subagents under their session. In a headless Chromium (skipped without one, failed
under CI), and the same pages through the app in process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.backend_pass import database_env_for
from tests.conftest import run_cli
from tests.ui.conftest import UiServer, start_ui, stop

FIXTURES = Path(__file__).parents[1] / "fixtures" / "transcripts"


def _sid(name: str) -> str:
    for line in (FIXTURES / name).read_text().splitlines():
        doc = json.loads(line)
        if "sessionId" in doc:
            return str(doc["sessionId"])
    raise AssertionError(name)


REWIND = _sid("claude-rewind.jsonl")
SUBAGENTS = _sid("claude-subagents-inline.jsonl")


def _import_all(root: Path) -> None:
    for name in ("claude-rewind.jsonl", "claude-subagents-inline.jsonl"):
        r = run_cli("--root", str(root), "session", "import", str(FIXTURES / name))
        assert r.code == 0, r.err


@pytest.fixture(scope="module")
def transcripts_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    root = tmp_path_factory.mktemp("ui-transcripts") / "run"
    root.mkdir()
    _import_all(root)
    # on the PostgreSQL pass the root's archive is a schema: the server is told so
    proc, url = start_ui(["--root", str(root), "ui", "--port", "0"], env=database_env_for(root))
    try:
        yield UiServer(proc, url, root, None, {}, root)
    finally:
        stop(proc)


def test_the_timeline_of_an_imported_transcript_in_process(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from alpstore.ui.app import create_app
    from alpstore.ui.settings import Settings
    from tests.ui.test_ui_server import read_only

    root = tmp_path / "run"
    root.mkdir()
    _import_all(root)
    ro = read_only(root)
    try:
        head = ro.resolve_checkpoint(f"{REWIND}@latest")
        settings = Settings(ro, "tok", 4242, ["127.0.0.1"], tmp_path)
        with TestClient(create_app(settings), base_url="http://127.0.0.1:4242") as c:
            c.get("/?token=tok")
            timeline = c.get(f"/s/{REWIND}").text
            conversation = c.get(f"/c/{head.id}").text
            parent = c.get(f"/s/{SUBAGENTS}").text
            sessions = c.get("/").text
    finally:
        ro.close()
    assert timeline.count('class="marker marker-backtrack"') == 3
    assert timeline.count('class="marker marker-fold"') == 1
    assert timeline.count("marker-import") == 0
    assert timeline.count('class="ck cut"') + timeline.count("ck cut") >= 3
    assert 'class="summary-node"' in conversation or "summary-node" in conversation
    assert (
        "Third attempt" in conversation
        and "First attempt" not in conversation.split("summary-node", 1)[0]
    )
    assert parent.count("marker-subagent") == 2 and f"{SUBAGENTS}.agent-a1b2c3" in parent
    assert f"{SUBAGENTS}.agent-d4e5f6" in sessions


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as pw_expect

    return pw_expect(locator)


def test_the_timeline_of_an_imported_transcript_in_chromium(
    browser: Any, transcripts_ui: UiServer
) -> None:
    context = browser.new_context(viewport={"width": 1100, "height": 720})
    page = context.new_page()
    page.set_default_timeout(10_000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(transcripts_ui.url)
        # sessions: the subagents nested under the session that started them
        nested = page.locator(
            "#sessions li.session.depth-1",
            has=page.locator(f"a[href='/s/{SUBAGENTS}.agent-a1b2c3']"),
        )
        expect(nested).to_have_count(1)
        page.goto(f"{transcripts_ui.base}/s/{REWIND}")
        expect(page.locator("tr.marker-backtrack")).to_have_count(3)
        expect(page.locator("tr.marker-fold")).to_have_count(1)
        assert page.locator("tr.ck.cut").count() == 3
        # the cut branch is reachable: its conversation holds the abandoned attempt
        page.locator("tr.ck.cut a.view").first.click()
        expect(page.locator("article.entry").last).to_contain_text("First answer")
        page.go_back()
        # the latest checkpoint: the compaction's summary opens onto the raw entries
        page.locator("tr.ck:not(.cut) a.view").last.click()
        summary = page.locator("details.summary-node").first
        expect(summary.locator(".leaves")).to_be_hidden()
        summary.locator("summary").click()
        expect(summary.locator(".leaves")).to_be_visible()
        expect(summary.locator(".leaves")).to_contain_text("Third attempt")
        page.goto(f"{transcripts_ui.base}/s/{SUBAGENTS}")
        expect(page.locator("tr.marker-subagent")).to_have_count(2)
        page.locator("tr.marker-subagent a.subagent").first.click()
        expect(page.locator("h1")).to_contain_text("agent-")
    finally:
        context.close()
    assert not errors, errors
