"""Issue 39 case 5: checkpoint references parse ASCII digits only. ``²`` and ``①`` pass
``str.isdigit()`` (and ``\\d``) but ``int()`` refuses them: every command taking a checkpoint
reference exited 70 on them, and the inspector answered ``/diff?a=²`` with a 500.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from alpstore.db import opening
from alpstore.errors import NotFoundError
from alpstore.store import Store
from alpstore.ui.app import create_app
from alpstore.ui.readonly import open_read_only
from alpstore.ui.settings import Settings
from tests.conftest import run_cli

REFS = ["\u00b2", "\u2460", "s@\u00b2", "s@1.\u00b2", "s@\u2460", "\u0661", "s@\u0661"]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("digits")
    with Store.open(root) as store:
        s = store.create_session(name="s")
        for i in range(3):
            s.commit_turn([{"role": "user", "content": f"t{i}"}])
    return root


@pytest.mark.parametrize("ref", REFS)
def test_resolve_refuses_non_ascii_digits(root: Path, ref: str) -> None:
    with Store.open(root) as store, pytest.raises(NotFoundError):
        store.resolve_checkpoint(ref)


@pytest.mark.parametrize("ref", ["\u00b2", "s@\u00b2", "s@1.\u00b2"])
@pytest.mark.parametrize(
    "command",
    [
        ("debug", "show", "{ref}"),
        ("debug", "diff", "{ref}", "s@1"),
        ("session", "fork", "{ref}"),
        ("session", "backtrack", "s", "{ref}"),
        ("session", "show", "s", "--at", "{ref}"),
        ("session", "resume", "s", "--at", "{ref}"),
    ],
)
def test_commands_refuse_non_ascii_digits(root: Path, ref: str, command: tuple[str, ...]) -> None:
    args = [a.format(ref=ref) for a in command]
    r = run_cli("--root", str(root), *args)
    assert r.code not in (0, 70), (args, r.err)
    assert "Traceback" not in r.err and "internal error" not in r.err, r.err


def test_inspector_diff_is_not_a_500(root: Path) -> None:
    ro = open_read_only(root, opening.default_database_url(root))
    try:
        client = TestClient(create_app(Settings(ro, "t0ken", 8765, ["testserver"], label="d")))
        assert client.get("/?token=t0ken").status_code == 200
        for ref in ("\u00b2", "s@\u00b2", "\u2460"):
            r = client.get("/diff", params={"a": ref, "b": "s@1"})
            assert r.status_code == 404, (ref, r.status_code)
        r = client.get("/diff", params={"a": "s@1", "b": "s@2", "page": "\u00b2"})
        assert r.status_code == 400
    finally:
        ro.db.close()
