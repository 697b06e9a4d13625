"""The inspector in a real headless Chromium, on SQLite and PostgreSQL: the walk a person takes
(sessions → timeline → conversation → summary → diff → bisect), hostile transcripts rendered as
text, the token gate, a live timeline, and an archive left byte-for-byte as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from alpstore.db.migrate import SCHEMA_HEAD
from tests.backend_pass import database_env_for
from tests.ui._ui_demo import STEERING, SUMMARY
from tests.ui.conftest import UiServer, fingerprint

SHOTS_ENV = "ALPSTORE_UI_SCREENSHOTS"
"""A folder: the walk saves its screenshots there (``docs`` for the README's)."""


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as pw_expect

    return pw_expect(locator)


def shot(page: Any, ui: UiServer, name: str) -> None:
    folder = os.environ.get(SHOTS_ENV)
    if folder and ui.db_url is None:
        page.screenshot(path=str(Path(folder) / f"ui-{name}.png"))


def walk(page: Any, ui: UiServer) -> None:
    """Sessions → timeline → conversation → summary → diff → bisect, asserting each page."""
    ids = ui.ids
    # sessions: the lineage tree, the fork nested under its parent, the backtrack's steering
    expect(page.locator("h1")).to_contain_text("Sessions")
    demo_item = page.locator(
        "#sessions > li.session", has=page.locator(f"a[href='/s/{ids['demo']}']")
    )
    child_item = page.locator(
        "#sessions > li.session.depth-1", has=page.locator(f"a[href='/s/{ids['child']}']")
    )
    expect(child_item.locator("a.session-link")).to_have_text(
        "experiment" + f" ({ids['child'][:8]})"
    )
    expect(child_item.locator(".fork")).to_contain_text("forked at turn 20")
    expect(demo_item.locator("li.backtrack").first).to_contain_text(STEERING)
    page.fill("#q", "experi")
    page.click("form.search button")
    expect(page.locator("#sessions li.session")).to_have_count(1)
    page.click("#nav-sessions")
    page.click(f"a.session-link[href='/s/{ids['demo']}']")

    # timeline: every checkpoint, and the backtrack, fold, fork, decision and cut ones marked
    expect(page.locator("h1")).to_contain_text("demo")
    expect(page.locator("tr.marker-backtrack")).to_contain_text(STEERING)
    expect(page.locator("tr.marker-fold")).to_contain_text("entries 1..21")
    expect(page.locator("tr.marker-fork")).to_contain_text("experiment")
    expect(page.locator("tr.marker-recovery")).to_contain_text("retry")
    assert page.locator("tr.ck.cut").count() >= 2
    assert page.locator("#chart rect.bar").count() == page.locator("tr.ck").count()
    page.locator("tr.marker-fold").evaluate("el => el.scrollIntoView({block: 'center'})")
    shot(page, ui, "timeline")

    # conversation at turn 3: the entries that turn added are highlighted
    row = page.locator("tr.ck[data-seq='3']")
    added = int(row.locator("td").nth(6).inner_text().lstrip("+"))
    row.locator("a.view").click()
    expect(page.locator("h1")).to_contain_text("demo@3")
    expect(page.locator("article.entry.new")).to_have_count(added)
    expect(page.locator("article.entry").first).to_contain_text("system")
    page.go_back()

    # the checkpoint right after the fold: its summary expands to the 20 leaves it covers
    page.locator(f"tr.ck[data-ck='{ids['folded']}'] a.view").click()
    page.locator("nav.pager a", has_text="first").first.click()
    summary = page.locator("#e1 details.summary-node")
    expect(summary.locator("summary")).to_contain_text(SUMMARY)  # shown as text, not bold
    expect(summary.locator(".leaves")).to_be_hidden()
    summary.locator("summary").click()
    expect(summary.locator(".leaves")).to_be_visible()
    expect(summary.locator(".leaves .leaf")).to_have_count(20)
    shot(page, ui, "conversation")
    page.locator("#facts a", has_text="timeline").click()

    # diff of the first checkpoint and the folded one: the same result as `debug diff`
    first = page.locator("tr.ck").first
    last = page.locator(f"tr.ck[data-ck='{ids['folded']}']")
    a_id, b_id = first.get_attribute("data-ck"), last.get_attribute("data-ck")
    first.locator("input[name=a]").check()
    last.locator("input[name=b]").check()
    page.click("#diff-go")
    expect(page.locator("#diff-summary")).to_be_visible()
    cli = ui.cli("debug", "diff", str(a_id), str(b_id), "--json")
    assert cli.code == 0, cli.err
    want = json.loads(cli.out)
    expect(page.locator("#common")).to_have_text(str(want["common_prefix"]))
    expect(page.locator("#removed")).to_have_text(str(len(want["removed"])))
    expect(page.locator("#added")).to_have_text(str(len(want["added"])))
    expect(page.locator("#folds")).to_have_text(str(len(want["folded"])))
    assert len(want["folded"]) == 1
    replaced = len(want["folded"][0]["replaced"])
    expect(page.locator("section.fold h2")).to_contain_text(f"folded {replaced} entries")
    shot(page, ui, "diff")

    # across the fork: the fork's own message against the parent's turn 21 is a changed
    # entry, shown with a text diff inside it
    page.goto(f"{ui.base}/diff?a={ids['child']}@latest&b={ids['demo']}@21")
    expect(page.locator("#changed")).to_have_text("1")
    changed = page.locator(".op-changed pre.textdiff")
    expect(changed.locator(".del")).to_contain_text("Try the other approach from here.")
    expect(changed.locator(".ins").first).to_contain_text("Please")

    # bisect by regex: the first checkpoint whose history runs rm -rf
    page.goto(f"{ui.base}/s/{ids['demo']}")
    page.fill("#grep", r"rm -rf")
    page.click("#bisect-go")
    expect(page.locator("#first-bad")).to_contain_text(f"turn {ids['bad_turn']}")
    expect(page.locator("ol.tested li")).not_to_have_count(0)

    # archive and continuity
    page.click("#nav-archive")
    page.click("#verify")
    expect(page.locator("#verify-result")).to_contain_text("nothing wrong")
    page.click("#nav-continuity")
    page.click("a[href*='exec_demo']")
    expect(page.locator("ul.pins .pin")).to_have_text("Open archives <script>read-only</script>")
    expect(page.locator("#render")).to_contain_text("Ship the <b>inspector</b>")
    expect(page.locator("#journal")).to_contain_text("generation")


def test_walk_leaves_archive_bytes_and_revision_unchanged(page: Any, ui_server: UiServer) -> None:
    """The whole walk, then the archive compared with how it was before: same bytes (SQLite
    file and WAL) or same rows (every PostgreSQL table), same schema revision."""
    before = fingerprint(ui_server.root, ui_server.db_url)
    walk(page, ui_server)
    page.goto(f"{ui_server.base}/c/{ui_server.ids['folded']}")
    page.goto(f"{ui_server.base}/s/{ui_server.ids['child']}")
    after = fingerprint(ui_server.root, ui_server.db_url)
    assert after == before
    assert after["revision"] == SCHEMA_HEAD


def test_hostile_transcript_renders_as_text(page: Any, ui_server: UiServer) -> None:
    page.goto(f"{ui_server.base}/s/{ui_server.ids['xss']}")
    expect(page.locator("h1")).to_contain_text("xss<b>bold</b>")
    expect(page.locator("tr.ck td").nth(4)).to_have_text("<i>label</i>")
    page.locator("tr.ck a.view").click()
    conv = page.locator("#conversation")
    expect(conv).to_contain_text("<script>window.__pwned = 1</script>please look")
    expect(conv).to_contain_text('<img src=x onerror="window.__pwned = 2">')
    expect(conv).to_contain_text("javascript:window.__pwned=4")
    expect(conv).to_contain_text("<svg onload=alert(5)>")
    expect(conv).to_contain_text("\\x1b[31mred\\x1b[0m \\u202eevil")  # ANSI and bidi as text
    expect(conv).to_contain_text("<script>alert(6)</script>")
    assert conv.locator("script, img, svg, iframe, a[href^='javascript']").count() == 0
    assert conv.locator("b, i").count() == 0
    assert page.evaluate("() => window.__pwned === undefined")


def test_request_without_token_is_refused(browser: Any, ui_server: UiServer) -> None:
    context = browser.new_context()
    try:
        pg = context.new_page()
        response = pg.goto(f"{ui_server.base}/s/{ui_server.ids['demo']}")
        assert response.status == 401
        assert "token" in pg.inner_text("body")
        assert response.headers["content-security-policy"].startswith("default-src 'none'")
        response = pg.goto(f"{ui_server.base}/?token=wrong-{ui_server.url[-8:]}")
        assert response.status == 401
    finally:
        context.close()


def test_new_checkpoint_from_another_process_appears_in_open_timeline(
    page: Any, ui_server: UiServer
) -> None:
    page.goto(f"{ui_server.base}/s/{ui_server.ids['live']}")
    rows = page.locator("tr.ck")
    before = rows.count()
    writer = (
        "import sys\n"
        "from alpstore.store import Store\n"
        "with Store.open(sys.argv[1]) as st:\n"
        "    st.get_session('live').commit_turn([{'role': 'user', 'content': 'from afar'}])\n"
    )
    env = {**os.environ, **database_env_for(ui_server.root)}
    if ui_server.db_url:
        env["ALPSTORE_DATABASE_URL"] = ui_server.db_url
    subprocess.run(
        [sys.executable, "-c", writer, str(ui_server.root)], env=env, check=True, timeout=60
    )
    written = time.monotonic()
    expect(page.locator(f"tr.ck[data-seq='{before + 1}']")).to_be_visible(timeout=2_000)
    assert time.monotonic() - written < 2.0
    new = page.locator(f"tr.ck[data-seq='{before + 1}']")
    expect(new.locator("a.view")).to_have_attribute("href", f"/c/{new.get_attribute('data-ck')}")
    expect(new.locator("td").nth(6)).to_have_text("+1")
