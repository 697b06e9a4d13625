"""spec.checkpoint: every default, every inference, every error (CK-1…CK-4, CK-6, CK-7, CK-10)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest

from alpstore.errors import PolicyError
from alpstore.policy import (
    apply_overlays,
    effective_portability,
    find_workspace_config,
    load_manifest,
    merge_patch,
    parse_policy,
    parse_workspace_config,
    policy_of_manifest,
    resolve_checkpoint_dir,
)
from alpstore.portable.files import agent_schema

FIXTURES = Path(__file__).parent.parent / "fixtures" / "upstream"


# ------------------------------------------------------------------ defaults (CK-1)
def test_every_default() -> None:
    p = parse_policy(None)
    assert p.mode == "none"
    assert p.storage is None and p.storage_path is None and p.storage_source == "none"
    assert p.triggers == ()
    assert p.every_n_turns is None
    assert p.retention.mode == "all" and p.retention.n == 5
    assert p.portability == "self_contained"
    assert p.auto_resume_latest is False
    assert parse_policy({}) == p
    assert policy_of_manifest({"kind": "Agent"}) == p
    assert policy_of_manifest(None) == p


def test_full_policy_from_the_source_document() -> None:
    p = parse_policy(
        {
            "mode": "every_turn",
            "storage": {"kind": "hybrid", "path": ".mas/checkpoints"},
            "triggers": ["after_llm_call"],
            "retention": {"mode": "last_n", "n": 5},
            "portability": "self_contained",
            "auto_resume_latest": False,
        }
    )
    assert p.storage == "hybrid" and p.storage_path == ".mas/checkpoints"
    assert p.storage_source == "spec"
    assert p.triggers == ("after_llm_call",)
    assert p.retention.keep() == 5


# ------------------------------------------------------------------ inference (CK-2)
@pytest.mark.parametrize(
    ("spec", "storage", "source"),
    [
        ({"mode": "none"}, None, "none"),
        ({"mode": "in_memory"}, "memory", "inferred"),
        ({"mode": "on_event", "triggers": ["after_llm_call"]}, "disk", "inferred"),
        ({"mode": "every_turn"}, "disk", "inferred"),
        ({"mode": "every_turn", "storage": "memory"}, "memory", "spec"),
        ({"mode": "in_memory", "storage": "hybrid"}, "hybrid", "spec"),
        ({"mode": "every_turn", "storage": {"kind": "disk"}}, "disk", "spec"),
    ],
)
def test_storage_inference(spec: dict[str, Any], storage: str | None, source: str) -> None:
    p = parse_policy(spec)
    assert (p.storage, p.storage_source) == (storage, source)


@pytest.mark.parametrize(
    ("word", "canonical"),
    [
        ("self_contained", "self_contained"),
        ("deep", "self_contained"),
        ("reference", "reference"),
        ("shallow", "reference"),
    ],
)
def test_portability_aliases(word: str, canonical: str) -> None:
    assert parse_policy({"portability": word}).portability == canonical


def test_duplicate_triggers_collapse_keeping_the_first() -> None:
    p = parse_policy(
        {"mode": "on_event", "triggers": ["after_tool_call", "after_llm_call", "after_tool_call"]}
    )
    assert p.triggers == ("after_tool_call", "after_llm_call")


@pytest.mark.parametrize(
    ("retention", "keep"),
    [
        ({"mode": "all"}, None),
        ({"mode": "single"}, 1),
        ({"mode": "last_n"}, 5),
        ({"mode": "last_n", "n": 2}, 2),
        ({}, None),
    ],
)
def test_retention(retention: dict[str, Any], keep: int | None) -> None:
    assert parse_policy({"retention": retention}).retention.keep() == keep


def test_auto_resume_with_disk_or_hybrid_is_accepted() -> None:
    assert parse_policy({"mode": "every_turn", "auto_resume_latest": True}).auto_resume_latest
    assert parse_policy({"mode": "none", "storage": "hybrid", "auto_resume_latest": True}).storage


# ------------------------------------------------------------------ errors (strictness, CK-3)
ERRORS: list[tuple[dict[str, Any], str]] = [
    ({"bogus": 1}, "spec.checkpoint.bogus: unknown key"),
    ({"mode": "always"}, "spec.checkpoint.mode: 'always' is not one of"),
    ({"mode": 3}, "spec.checkpoint.mode: expected one of"),
    ({"storage": "cloud"}, "spec.checkpoint.storage: 'cloud' is not one of"),
    ({"storage": 7}, "spec.checkpoint.storage: expected memory, disk, hybrid or {kind, path}"),
    ({"storage": {"path": "x"}}, "spec.checkpoint.storage.kind: required"),
    ({"storage": {"kind": "disk", "where": "x"}}, "spec.checkpoint.storage.where: unknown key"),
    (
        {"storage": {"kind": "disk", "path": ""}},
        "spec.checkpoint.storage.path: expected a non-empty",
    ),
    ({"storage": {"kind": "tape"}}, "spec.checkpoint.storage.kind: 'tape' is not one of"),
    (
        {"mode": "on_event", "triggers": "after_llm_call"},
        "spec.checkpoint.triggers: expected a list",
    ),
    (
        {"mode": "on_event", "triggers": ["after_lunch"]},
        "spec.checkpoint.triggers[0]: 'after_lunch'",
    ),
    ({"mode": "on_event", "triggers": []}, "spec.checkpoint.triggers: mode on_event needs"),
    ({"mode": "on_event"}, "spec.checkpoint.triggers: mode on_event needs"),
    ({"triggers": ["after_llm_call"]}, "spec.checkpoint.triggers: mode none captures nothing"),
    (
        {"mode": "on_event", "triggers": ["every_n_turns"]},
        "spec.checkpoint.every_n_turns: required",
    ),
    ({"every_n_turns": 0}, "spec.checkpoint.every_n_turns: expected a positive integer, got 0"),
    (
        {"every_n_turns": True},
        "spec.checkpoint.every_n_turns: expected a positive integer, got boolean",
    ),
    (
        {"every_n_turns": 2.0},
        "spec.checkpoint.every_n_turns: expected a positive integer, got number",
    ),
    ({"retention": "all"}, "spec.checkpoint.retention: expected a mapping"),
    ({"retention": {"mode": "some"}}, "spec.checkpoint.retention.mode: 'some' is not one of"),
    (
        {"retention": {"n": True}},
        "spec.checkpoint.retention.n: expected a positive integer, got boolean",
    ),
    ({"retention": {"n": -1}}, "spec.checkpoint.retention.n: expected a positive integer, got -1"),
    ({"retention": {"mode": "all", "keep": 1}}, "spec.checkpoint.retention.keep: unknown key"),
    ({"portability": "portable"}, "spec.checkpoint.portability: 'portable' is not one of"),
    ({"auto_resume_latest": "yes"}, "spec.checkpoint.auto_resume_latest: expected a boolean"),
    (
        {"auto_resume_latest": 1},
        "spec.checkpoint.auto_resume_latest: expected a boolean, got integer",
    ),
    (
        {"auto_resume_latest": True},
        "auto_resume_latest: requires disk or hybrid storage, storage is none",
    ),
    (
        {"mode": "in_memory", "auto_resume_latest": True},
        "auto_resume_latest: not allowed with mode in_memory",
    ),
    (
        {"mode": "in_memory", "storage": "disk", "auto_resume_latest": True},
        "not allowed with mode in_memory",
    ),
    ({"mode": "every_turn", "storage": "memory", "auto_resume_latest": True}, "storage is memory"),
    ([], "spec.checkpoint: expected a mapping, got list"),
]


@pytest.mark.parametrize(("spec", "message"), ERRORS)
def test_errors_name_the_key_path(spec: Any, message: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(spec)
    assert message in str(info.value)


def test_agent_schema_agrees_with_the_parser() -> None:
    """The shipped agent.schema.yaml accepts what the parser accepts, and refuses key errors."""
    validator = jsonschema.Draft7Validator(agent_schema())
    good = [
        {},
        {"mode": "every_turn", "storage": {"kind": "hybrid", "path": "x"}, "portability": "deep"},
        {"mode": "on_event", "triggers": ["every_n_turns"], "every_n_turns": 3},
        {"mode": "every_turn", "auto_resume_latest": True, "retention": {"mode": "last_n", "n": 2}},
    ]
    for spec in good:
        parse_policy(spec)
        assert validator.is_valid({"kind": "Agent", "spec": {"checkpoint": spec}}), spec
    schema_bad = [
        spec
        for spec, _ in ERRORS
        if (isinstance(spec, dict) and "bogus" in spec)
        or spec
        in (
            {"mode": "always"},
            {"every_n_turns": 0},
            {"every_n_turns": True},
            {"retention": {"mode": "all", "keep": 1}},
            {"mode": "on_event"},
            {"mode": "in_memory", "auto_resume_latest": True},
            {"mode": "on_event", "triggers": ["every_n_turns"]},
        )
    ]
    assert len(schema_bad) == 8
    for spec in schema_bad:
        assert not validator.is_valid({"kind": "Agent", "spec": {"checkpoint": spec}}), spec


# ------------------------------------------------------------------ workspace (CK-7) and AR-2
@pytest.mark.parametrize(
    ("config", "store"),
    [
        ({}, None),
        ({"plugins": ["mas.checkpoint_store.hybrid"]}, "hybrid"),
        ({"plugins": {"mas.checkpoint_store.disk": {}}}, "disk"),
        ({"lab": {"enable_plugins": ["mas.checkpoint_store.memory", "other.plugin"]}}, "memory"),
        ({"plugins": ["alpstore.checkpoint_store.disk"]}, "disk"),
    ],
)
def test_workspace_enables_a_store(config: dict[str, Any], store: str | None) -> None:
    assert parse_workspace_config(config).checkpoint_store == store


def test_workspace_store_applies_only_when_the_spec_omits_storage() -> None:
    assert parse_policy({"mode": "every_turn"}, workspace_storage="hybrid").storage == "hybrid"
    assert parse_policy({"mode": "every_turn"}, workspace_storage="hybrid").storage_source == (
        "workspace"
    )
    spec_wins = parse_policy({"mode": "every_turn", "storage": "disk"}, workspace_storage="hybrid")
    assert (spec_wins.storage, spec_wins.storage_source) == ("disk", "spec")
    # a workspace store makes auto_resume_latest valid with mode none
    assert parse_policy({"auto_resume_latest": True}, workspace_storage="disk").auto_resume_latest


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ([], "expected a mapping at the top level"),
        ({"plugins": "mas.checkpoint_store.disk"}, "plugins: expected a list"),
        ({"plugins": ["mas.checkpoint_store.tape"]}, "unknown checkpoint store"),
        (
            {
                "plugins": ["mas.checkpoint_store.disk"],
                "lab": {"enable_plugins": ["mas.checkpoint_store.memory"]},
            },
            "more than one checkpoint store",
        ),
        (
            {"mas_ctl": {"archive": {"enabled": "yes"}}},
            "mas_ctl.archive.enabled: expected a boolean",
        ),
    ],
)
def test_workspace_errors(config: Any, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        parse_workspace_config(config)


def test_reference_falls_back_without_archive() -> None:
    shallow = parse_policy({"portability": "shallow"})
    port, notice = effective_portability(shallow, archive_enabled=False)
    assert port == "self_contained" and notice and "falling back" in notice
    assert effective_portability(shallow, archive_enabled=True) == ("reference", None)
    assert parse_workspace_config({"mas_ctl": {"archive": {"enabled": True}}}).archive_enabled
    assert not parse_workspace_config({}).archive_enabled


def test_find_workspace_config_beside_the_manifest(tmp_path: Path) -> None:
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "config.yaml").write_text("plugins: [mas.checkpoint_store.hybrid]\n")
    found = find_workspace_config(tmp_path / "agent" / "agent.yaml", tmp_path)
    assert found.checkpoint_store == "hybrid"
    assert find_workspace_config(None, tmp_path).checkpoint_store is None


# ------------------------------------------------------------------ directory (CK-6)
def test_checkpoint_dir_resolution_order(tmp_path: Path) -> None:
    manifest = tmp_path / "proj" / "agent.yaml"
    cwd = tmp_path / "cwd"
    disk = parse_policy({"mode": "every_turn"})
    with_path = parse_policy({"mode": "every_turn", "storage": {"kind": "disk", "path": "ck"}})
    absolute = parse_policy({"mode": "every_turn", "storage": {"kind": "disk", "path": "/abs"}})
    memory = parse_policy({"mode": "in_memory"})
    cli = tmp_path / "cli"
    kw = {"manifest_path": manifest, "cwd": cwd}
    assert resolve_checkpoint_dir(with_path, cli_dir=cli, **kw) == cli  # CLI wins
    assert resolve_checkpoint_dir(with_path, cli_dir=None, **kw) == manifest.parent / "ck"
    assert resolve_checkpoint_dir(absolute, cli_dir=None, **kw) == Path("/abs")
    assert resolve_checkpoint_dir(disk, cli_dir=None, **kw) == manifest.parent / ".mas/checkpoints"
    assert resolve_checkpoint_dir(disk, cli_dir=None, manifest_path=None, cwd=cwd) == (
        cwd / ".mas/checkpoints"
    )
    assert resolve_checkpoint_dir(memory, cli_dir=None, **kw) is None
    assert resolve_checkpoint_dir(memory, cli_dir=None, force=True, **kw) == (
        manifest.parent / ".mas/checkpoints"
    )


# ------------------------------------------------------------------ overlays (CK-10)
def test_openclaw_overlay_is_a_patch() -> None:
    base = {
        "apiVersion": "mas/v1",
        "kind": "Agent",
        "metadata": {"name": "a"},
        "spec": {
            "description": "d",
            "checkpoint": {"retention": {"n": 3}},
            "governance": [{"existing": True}],
        },
    }
    out = apply_overlays(base, ["openclaw"])
    assert base["spec"]["governance"] == [{"existing": True}]  # input untouched
    assert out["spec"]["description"] == "d"
    assert out["spec"]["governance"][0] == {"existing": True}
    assert out["spec"]["governance"][1]["sample"]["error_recovery_plugin"] == "backtrack_on_error"
    ck = out["spec"]["checkpoint"]
    assert ck["retention"] == {"mode": "all", "n": 3}  # mappings merge
    p = policy_of_manifest(out)
    assert (p.mode, p.triggers, p.auto_resume_latest, p.storage) == (
        "on_event",
        ("after_llm_call",),
        True,
        "disk",
    )


@pytest.mark.parametrize(
    "ref",
    [
        "openclaw",
        "pkg://alpstore/overlays/openclaw.yaml",
        "pkg://mas.library.standard/overlays/openclaw.yaml",
        str(FIXTURES / "openclaw.overlay.yaml"),
    ],
)
def test_overlay_addresses(ref: str) -> None:
    assert apply_overlays({"kind": "Agent"}, [ref]) == apply_overlays(
        {"kind": "Agent"}, ["openclaw"]
    )


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("nope", "no such file"),
        ("pkg://alpstore/../etc/passwd", "must be relative and stay inside"),
        ("pkg://alpstore/overlays/missing.yaml", "no such file in package"),
        ("pkg://not_a_package_xyz/o.yaml", "is not installed"),
        ("pkg://alpstore", "expected pkg://<package>/<path>"),
    ],
)
def test_overlay_address_errors(ref: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        apply_overlays({"kind": "Agent"}, [ref])


def test_overlay_file_checks(tmp_path: Path) -> None:
    bad_kind = tmp_path / "o.yaml"
    bad_kind.write_text("kind: Agent\nspec: {patch: {}}\n")
    with pytest.raises(PolicyError, match="kind: expected Overlay"):
        apply_overlays({"kind": "Agent"}, [str(bad_kind)])
    other = tmp_path / "t.yaml"
    other.write_text("kind: Overlay\nspec: {target: {kind: Team}, patch: {x: 1}}\n")
    with pytest.raises(PolicyError, match="does not match the manifest"):
        apply_overlays({"kind": "Agent"}, [str(other)])
    invalid = tmp_path / "i.yaml"
    invalid.write_text("kind: Overlay\nspec: {patch: {checkpoint: {mode: sometimes}}}\n")
    out = apply_overlays({"kind": "Agent"}, [str(invalid)])
    with pytest.raises(PolicyError, match=r"spec\.checkpoint\.mode"):
        policy_of_manifest(out)


def test_merge_patch_operations() -> None:
    assert merge_patch({"a": [1]}, {"a": {"$op": {"add": [2, 3]}}}, "spec") == {"a": [1, 2, 3]}
    assert merge_patch({}, {"a": {"$op": {"add": [2]}}}, "spec") == {"a": [2]}
    assert merge_patch({"a": 1, "b": 2}, {"a": None}, "spec") == {"b": 2}
    assert merge_patch({"a": [1]}, {"a": [9]}, "spec") == {"a": [9]}
    with pytest.raises(PolicyError, match=r"spec.a.\$op.remove: unknown list operation"):
        merge_patch({"a": [1]}, {"a": {"$op": {"remove": [1]}}}, "spec")
    with pytest.raises(PolicyError, match="needs a list here"):
        merge_patch({"a": {"x": 1}}, {"a": {"$op": {"add": [1]}}}, "spec")


def test_manifest_loading(tmp_path: Path) -> None:
    y = tmp_path / "agent.yaml"
    y.write_text("kind: Agent\nmetadata: {name: a}\nspec:\n  checkpoint:\n    mode: every_turn\n")
    j = tmp_path / "agent.json"
    j.write_text(
        '{"kind": "Agent", "metadata": {"name": "a"}, "spec": {"checkpoint": '
        '{"mode": "every_turn"}}}'
    )
    assert load_manifest(y) == load_manifest(j)
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Team\n")
    with pytest.raises(PolicyError, match="kind: expected Agent"):
        load_manifest(bad)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(PolicyError, match="not valid JSON"):
        load_manifest(broken)
