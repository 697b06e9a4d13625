"""The secret scan's rule (CK-11, issue 30 item 8), both sides, each form, end to end.

Each credential form the scan refuses and each placeholder it lets through (the rule as
docs/formats.md "Secrets (CK-11)" writes it down) goes into an archive the way a user's data
does — `alpstore checkpoint import` of a deep file (kernel and messages) and `alpstore session
import` of a transcript (messages) — and then `alpstore checkpoint export`: a credential is
refused (exit 9, its JSON path named, its value nowhere in the output, no file), a placeholder
exports. The library agrees: :func:`scan`, and the fast pre-filters that let a clean document
skip the walk (:func:`may_hold_secrets`, :func:`may_hold_secrets_canonical`) never skip a
credential.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from alpstore.canonical import canonical_json
from alpstore.errors import SecretError
from alpstore.rules.secrets import (
    may_hold_secrets,
    may_hold_secrets_canonical,
    require_no_secrets,
    scan,
)
from tests.conftest import run_cli

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "upstream"

# ------------------------------------------------------------------ the forms
TEXT_CREDENTIALS: dict[str, str] = {
    "url_password": "connect with postgresql://admin:Hunter2Pass@db.internal:5432/prod",
    "url_password_escaped": "mysql://app:p%40ssw0rd-Zq9@10.0.0.7/app",
    "authorization_bearer": "curl -H 'Authorization: Bearer 9f8e7d6c5b4a3f2e1d0c' https://api",
    "authorization_basic": "Authorization: Basic YWRtaW46aHVudGVyMg==",
    "proxy_authorization": "Proxy-Authorization: Basic cHJveHk6c2VjcmV0cGFzcw==",
    "cookie": "Cookie: sessionid=k2j3h4g5f6d7s8a9",
    "set_cookie": "Set-Cookie: auth=Zx8Yw7Vu6Ts5; HttpOnly",
    "x_api_key": "X-Api-Key: 7a6b5c4d3e2f1a0b",
    "hugging_face": "export HF_TOKEN=hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "gitlab": "git clone https://oauth2@gitlab.com/x.git # glpat-" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn",
}
"""Credentials written in text: a message's content."""

SECRET_VALUES = {
    "url_password": "Hunter2Pass",
    "url_password_escaped": "p%40ssw0rd-Zq9",
    "authorization_bearer": "9f8e7d6c5b4a3f2e1d0c",
    "authorization_basic": "YWRtaW46aHVudGVyMg==",
    "proxy_authorization": "cHJveHk6c2VjcmV0cGFzcw==",
    "cookie": "k2j3h4g5f6d7s8a9",
    "set_cookie": "Zx8Yw7Vu6Ts5",
    "x_api_key": "7a6b5c4d3e2f1a0b",
    "hugging_face": "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
    "gitlab": "glpat-Ab1Cd2Ef3Gh4Ij5Kl6Mn",
    "header_authorization": "Bearer 0a1b2c3d4e5f6a7b",
    "header_cookie": "sid=5e4d3c2b1a09",
    "env_list": "S3cr3tValue!",
    "env_list_token": "tok-8c7b6a5d4e3f",
    "numeric_password": "73519246",
    "list_password": "HunterList2",
    "nested_url": "Hunter3Pass",
}
"""The part of each form that must never be printed (the credential itself)."""

STRUCTURED_CREDENTIALS: dict[str, Any] = {
    "header_authorization": {"headers": {"Authorization": "Bearer 0a1b2c3d4e5f6a7b"}},
    "header_cookie": {"headers": {"Cookie": "sid=5e4d3c2b1a09"}},
    "env_list": {"env": [{"name": "DB_PASSWORD", "value": "S3cr3tValue!"}]},
    "env_list_token": {"env": [{"name": "API_TOKEN", "value": "tok-8c7b6a5d4e3f"}]},
    "numeric_password": {"db": {"password": 73519246}},
    "list_password": {"db": {"password": ["HunterList2"]}},
    "nested_url": {"db": {"dsn": "postgresql://svc:Hunter3Pass@db:5432/x"}},
}
"""Credentials written as data: a kernel's or working memory's values."""

TEXT_PLACEHOLDERS: dict[str, str] = {
    "url_angle": "postgresql://admin:<password>@db.example.com/prod",
    "url_var": "postgresql://admin:${PGPASSWORD}@db/prod and redis://:$REDIS_PASS@cache:6379",
    "url_no_password": "https://user@example.com/path and https://user:@example.com/",
    "url_stars": "mysql://root:****@localhost/app",
    "bearer_angle": "Authorization: Bearer <token>",
    "bearer_var": "Authorization: Bearer ${API_TOKEN}",
    "bearer_template": "Authorization: Bearer {{ api_token }}",
    "cookie_redacted": "Cookie: session=REDACTED",
    "api_key_xxx": "X-Api-Key: xxxxxxxx",
    "api_key_bullets": "X-Api-Key: •••",
    "plain_text": "the password must be rotated; set the token in your environment",
}
"""Placeholders in text (docs, templates, a redacted log): never refused."""

STRUCTURED_PLACEHOLDERS: dict[str, Any] = {
    "empty": {"password": ""},
    "angle": {"password": "<password>"},
    "stars": {"api_key": "***"},
    "xs": {"secret": "xxx"},
    "bullets": {"token": "•••••"},
    "braced_var": {"client_secret": "${CLIENT_SECRET}"},
    "dollar_var": {"access_token": "$ACCESS_TOKEN"},
    "template": {"password": "{{ db_password }}"},
    "changeme": {"password": "changeme"},
    "change_me": {"password": "change-me"},
    "example": {"api_key": "example"},
    "redacted": {"password": "[REDACTED]"},
    "placeholder": {"secret": "placeholder"},
    "env_reference": {"password": "${env:DB_PASSWORD}"},
    "secret_reference": {"api_key": "secret://vault/app/api_key"},
    "env_list_placeholder": {"env": [{"name": "DB_PASSWORD", "value": "${DB_PASSWORD}"}]},
    "env_list_from_secret": {
        "env": [{"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}]
    },
    "header_placeholder": {"headers": {"Authorization": "Bearer <token>"}},
    "boolean_flag": {"password": True},
    "not_a_secret_key": {"passwords_rotated_at": "2026-01-01", "keyboard": "qwerty"},
}
"""Placeholders and references as data: never refused."""


# ------------------------------------------------------------------ files
def _deep(messages: list[str], kernel_q: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURE / "mas-lab-checkpoint-v2.example.json").read_text())
    doc["kernel"] = {"q": kernel_q, "run": {}}
    doc["working_memory"] = [
        {
            "agent_id": "a",
            "turn_history": [],
            "committed_messages": [
                {"role": "user" if i % 2 == 0 else "assistant", "content": text}
                for i, text in enumerate(messages)
            ],
            "conversation_chunks": {},
        }
    ]
    return doc


def _transcript(path: Path, messages: list[str]) -> None:
    lines = [
        json.dumps({"role": "user" if i % 2 == 0 else "assistant", "content": text})
        for i, text in enumerate(messages)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _everything(root: Path, *outputs: str) -> str:
    text = "".join(outputs)
    for path in root.rglob("*"):
        if path.is_file() and path.suffix in (".jsonl", ".json", ".md", ".zst", ".log"):
            text += path.read_bytes().decode("utf-8", "replace")
    return text


def _export(root: Path, ref: str, out: Path) -> Any:
    return run_cli("--root", str(root), "checkpoint", "export", f"{ref}@latest", "-o", str(out))


def _refused(result: Any, out: Path, root: Path, paths: list[str], values: list[str]) -> None:
    assert result.code == SecretError.exit_code, (result.code, result.err)
    assert not out.exists() and list(out.parent.glob(f"{out.name}*")) == []
    assert "Traceback" not in result.err and len(result.err.strip().splitlines()) == 2
    for where in paths:
        assert where in result.err, (where, result.err)
    written = _everything(root, result.out, result.err)
    for value in values:
        assert value not in result.err and value not in result.out, value
    assert "refusing to write" in written


# ------------------------------------------------------------------ end to end, refused
TEXT_KEYS = list(TEXT_CREDENTIALS)
STRUCT_KEYS = list(STRUCTURED_CREDENTIALS)


def test_every_credential_form_in_a_deep_file_imports_but_never_exports(tmp_path: Path) -> None:
    """Messages (text forms) and the kernel (data forms) of an imported deep file."""
    # at most 10 findings are listed: text forms in one file, data forms in another
    for group, (messages, kernel_q, paths) in {
        "text": (
            [TEXT_CREDENTIALS[k] for k in TEXT_KEYS],
            {},
            [f"$.working_memory[0].committed_messages[{i}].content" for i in range(len(TEXT_KEYS))],
        ),
        "data": (["hello"], dict(STRUCTURED_CREDENTIALS), [f"$.kernel.q.{k}" for k in STRUCT_KEYS]),
    }.items():
        root = tmp_path / group
        file = tmp_path / f"{group}.json"
        doc = _deep(messages, kernel_q)
        doc["lineage"]["session_id"] = f"forms-{group}"
        doc["lineage"]["root_session_id"] = f"forms-{group}"
        file.write_text(json.dumps(doc), encoding="utf-8")
        imported = run_cli("--root", str(root), "checkpoint", "import", str(file))
        assert imported.code == 0, imported.err  # the archive holds what the agent saw
        out = tmp_path / f"out-{group}" / "x.json"
        out.parent.mkdir()
        keys = TEXT_KEYS if group == "text" else STRUCT_KEYS
        _refused(
            _export(root, f"forms-{group}", out),
            out,
            root,
            paths,
            [SECRET_VALUES[k] for k in keys],
        )


def test_every_text_credential_in_a_transcript_imports_but_never_exports(tmp_path: Path) -> None:
    root = tmp_path / "run"
    transcript = tmp_path / "chat.jsonl"
    _transcript(transcript, [TEXT_CREDENTIALS[k] for k in TEXT_KEYS])
    imported = run_cli("--root", str(root), "session", "import", str(transcript), "--name", "chat")
    assert imported.code == 0, imported.err
    out = tmp_path / "out" / "chat.json"
    out.parent.mkdir()
    paths = [f"$.working_memory[0].committed_messages[{i}].content" for i in range(len(TEXT_KEYS))]
    _refused(_export(root, "chat", out), out, root, paths, [SECRET_VALUES[k] for k in TEXT_KEYS])


# ------------------------------------------------------------------ end to end, let through
def test_every_placeholder_in_a_deep_file_exports(tmp_path: Path) -> None:
    root = tmp_path / "run"
    file = tmp_path / "placeholders.json"
    doc = _deep(list(TEXT_PLACEHOLDERS.values()), dict(STRUCTURED_PLACEHOLDERS))
    file.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    imported = run_cli("--root", str(root), "checkpoint", "import", str(file))
    assert imported.code == 0, imported.err
    out = tmp_path / "out.json"
    exported = _export(root, doc["lineage"]["session_id"], out)
    assert exported.code == 0, exported.err
    back = json.loads(out.read_text(encoding="utf-8"))
    contents = [m["content"] for m in back["working_memory"][0]["committed_messages"]]
    assert contents == list(TEXT_PLACEHOLDERS.values())
    assert back["kernel"]["q"] == STRUCTURED_PLACEHOLDERS


def test_every_placeholder_in_a_transcript_exports(tmp_path: Path) -> None:
    root = tmp_path / "run"
    transcript = tmp_path / "docs.jsonl"
    _transcript(transcript, list(TEXT_PLACEHOLDERS.values()))
    imported = run_cli("--root", str(root), "session", "import", str(transcript), "--name", "docs")
    assert imported.code == 0, imported.err
    out = tmp_path / "docs.json"
    exported = _export(root, "docs", out)
    assert exported.code == 0, exported.err
    assert "<password>" in out.read_text(encoding="utf-8")


# ------------------------------------------------------------------ the library
def _fast_paths_agree(doc: Any, *, finds: bool) -> None:
    """The pre-filters may say "maybe" for a clean document, never "no" for a credential."""
    if finds:
        assert may_hold_secrets(json.dumps(doc, ensure_ascii=False))
        assert may_hold_secrets(json.dumps(doc))
        assert may_hold_secrets_canonical(canonical_json(doc))


@pytest.mark.parametrize("key", TEXT_KEYS)
def test_the_library_refuses_each_text_credential(key: str) -> None:
    for doc in ({"content": TEXT_CREDENTIALS[key]}, [TEXT_CREDENTIALS[key]]):
        findings = scan(doc)
        assert len(findings) == 1, (key, findings)
        assert SECRET_VALUES[key] not in findings[0].kind + findings[0].path
        _fast_paths_agree(doc, finds=True)
        with pytest.raises(SecretError) as err:
            require_no_secrets(doc, what="doc", json_text=json.dumps(doc))
        assert SECRET_VALUES[key] not in err.value.message


@pytest.mark.parametrize("key", STRUCT_KEYS)
def test_the_library_refuses_each_structured_credential(key: str) -> None:
    doc = {"q": STRUCTURED_CREDENTIALS[key]}
    findings = scan(doc)
    assert findings, key
    _fast_paths_agree(doc, finds=True)
    with pytest.raises(SecretError) as err:
        require_no_secrets(doc, what="doc", json_text=json.dumps(doc))
    assert SECRET_VALUES[key] not in err.value.message


@pytest.mark.parametrize("key", list(TEXT_PLACEHOLDERS))
def test_the_library_lets_each_text_placeholder_through(key: str) -> None:
    doc = {"content": TEXT_PLACEHOLDERS[key]}
    assert scan(doc) == []
    require_no_secrets(doc, what="doc", json_text=json.dumps(doc))


@pytest.mark.parametrize("key", list(STRUCTURED_PLACEHOLDERS))
def test_the_library_lets_each_structured_placeholder_through(key: str) -> None:
    doc = {"q": STRUCTURED_PLACEHOLDERS[key]}
    assert scan(doc) == []
    require_no_secrets(doc, what="doc", json_text=json.dumps(doc))


def test_a_placeholder_beside_a_credential_does_not_hide_it() -> None:
    doc = {"a": {"password": "<password>"}, "b": {"password": "R3alPassw0rd"}}
    assert [f.path for f in scan(doc)] == ["$.b.password"]
    url = "postgresql://a:<password>@h/db then postgresql://b:R3alPassw0rd@h/db"
    assert [f.kind for f in scan({"t": url})] == ["password in a URL"]
