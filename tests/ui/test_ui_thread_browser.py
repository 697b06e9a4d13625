"""The inspector's LangGraph thread page in a real headless Chromium, on the scripted agent of
issue 31 (a tool loop, an interrupt and its resume, ``update_state`` on an older checkpoint):
node names, tool calls, the branch and the channels; a screenshot for docs/."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.graph", reason="langgraph is not installed (alpstore[langgraph])")

from tests.backend_pass import DATABASE_URL_ENV, database_env_for
from tests.cli._lg_agent import Scripted, build_agent
from tests.ui.conftest import fingerprint, start_ui, stop
from tests.ui.test_ui_browser import SHOTS_ENV, expect


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Scripted]]:
    root = tmp_path_factory.mktemp("ui-thread") / "run"
    root.mkdir()
    script = build_agent(root)
    env = database_env_for(root)  # the PostgreSQL pass: the root's own schema
    proc, url = start_ui(["--root", str(root), "ui", "--port", "0"], env=env)
    try:
        yield url, root, script
    finally:
        stop(proc)


@pytest.fixture
def page(browser: Any, served: tuple[str, Path, Scripted]) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(10_000)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(served[0])
    try:
        yield pg
    finally:
        context.close()
    assert not errors, f"page errors: {errors}"


def test_thread_page_shows_nodes_tool_calls_branch_and_channels(
    page: Any, served: tuple[str, Path, Scripted]
) -> None:
    _url, root, _ = served
    db_url = database_env_for(root).get(DATABASE_URL_ENV)
    before = fingerprint(root, db_url)
    page.click("a.session-link >> text=langgraph:t1")
    page.click("#thread-link")
    expect(page.locator("h1")).to_contain_text("langgraph:t1")
    # the steps grouped by turn, each with the node that wrote it
    expect(page.locator("section.turn")).to_have_count(4)  # turns 0..3
    turn2 = page.locator("section.turn[data-turn='2'] li.step .node")
    expect(turn2).to_have_text(["__start__", "agent", "approve", "tools", "agent"])
    expect(page.locator("li.step.selected .node")).to_have_text("(update)")
    # the interrupt is marked on its step; the branch is in the timeline and listed
    rm_step = page.locator("li.step", has=page.locator(".mark"))
    expect(rm_step).to_contain_text("interrupt at approve")
    expect(page.locator("nav.steps li.branch")).to_contain_text("back 1 step(s) to checkpoint")
    expect(page.locator("#branches li.branch")).to_have_count(1)
    expect(page.locator("li.step.cut")).to_have_count(1)
    # the conversation at the head: tool calls with their arguments
    conv = page.locator("#conversation")
    calls = conv.locator("div.call")
    expect(calls.locator(".fn")).to_have_text(["shell", "shell"])
    expect(calls.nth(1).locator("pre")).to_contain_text('"cmd": "rm -rf build"')
    expect(conv).to_contain_text("next time keep a backup")
    # the other channels, as JSON
    expect(page.locator("#channels")).to_contain_text('"approvals": 2')
    folder = os.environ.get(SHOTS_ENV)
    if folder and db_url is None:
        page.screenshot(path=str(Path(folder) / "ui-thread.png"), full_page=True)
    # an earlier step: its own conversation and channels
    page.locator("section.turn[data-turn='1'] li.step", has_text="@1.4").locator("a").click()
    expect(page.locator("#step-title")).to_contain_text("tools")
    expect(page.locator("#conversation article.entry")).to_have_count(3)
    expect(page.locator("#conversation div.call pre")).to_contain_text('"cmd": "ls"')
    expect(page.locator("#channels")).to_contain_text('"approvals": 1')
    assert fingerprint(root, db_url) == before  # the inspector wrote nothing


def test_thread_page_refuses_what_is_not_a_step_of_a_thread(
    page: Any, served: tuple[str, Path, Scripted]
) -> None:
    base = served[0].split("/?", 1)[0]
    other = page.goto(f"{base}/t/langgraph:t2?ck=1")  # checkpoint 1 is t1's
    assert other is not None and other.status == 404
    expect(page.locator("body")).to_contain_text("is not a step of langgraph:t2")
    bad = page.goto(f"{base}/t/langgraph:t1?ck=x")
    assert bad is not None and bad.status == 400
    waiting = page.goto(f"{base}/t/langgraph:t2")
    assert waiting is not None and waiting.status == 200
    expect(page.locator("li.step.selected .mark")).to_contain_text("pending writes of 1 task(s)")
