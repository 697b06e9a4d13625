"""Issue 14, items 6–9: what an import must not lose (half an import, its own exports, state,
names and fields)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update
from typer.testing import CliRunner

import alpstore.archive.sql
import alpstore.sessions
from alpstore.db.tables import sessions
from alpstore.errors import AlpstoreError
from alpstore.portable.deep import snapshot_of_head
from alpstore.portable.importing import import_document
from alpstore.store import Store
from tests.conftest import run_cli
from tests.imports._files import fingerprint, mas_doc, write


def _transcript(path: Path, turns: int, pad: int = 0) -> Path:
    lines = []
    for i in range(turns):
        lines.append(json.dumps({"role": "user", "content": f"question {i}"}))
        lines.append(json.dumps({"role": "assistant", "content": f"answer {i} " + "x" * pad}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, owner: Any, attr: str, calls: int) -> None:
    real = getattr(owner, attr)
    count = {"n": 0}

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        count["n"] += 1
        if count["n"] > calls:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, attr, wrapper)


# ---------------------------------------------------------------- 6. half an import
def test_item6_interrupted_transcript_import_leaves_nothing(
    run_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from alpstore.cli.session import app

    # answers of 12 KB: about 16 turns a frame, so the turns are written in several batches
    source = _transcript(tmp_path / "conv.jsonl", 40, pad=12_000)
    with Store.open(run_root) as st:
        st.create_session(name="other")
        before = fingerprint(st)
    _interrupt_after(monkeypatch, alpstore.sessions.Session, "write_turns", 1)  # Ctrl-C
    opts = _opts(run_root)
    result = CliRunner().invoke(app, ["import", str(source)], obj=opts)
    opts.close()
    assert result.exit_code == 130, result  # click's answer to Ctrl-C
    monkeypatch.undo()
    with Store.open(run_root) as st:
        assert fingerprint(st) == before  # no session at turn 25 of 40 posing as complete


def test_item6_interrupted_deep_import_leaves_nothing(
    run_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = mas_doc(messages=[{"role": "user", "content": f"m{i}"} for i in range(1500)])
    with Store.open(run_root) as st:
        before = fingerprint(st)
        _interrupt_after(monkeypatch, alpstore.archive.sql.SqlArchive, "store_encoded", 1)
        with pytest.raises(KeyboardInterrupt):
            import_document(st, doc, source_name="f.json")
        monkeypatch.undo()
        assert fingerprint(st) == before


def _opts(root: Path) -> Any:
    from alpstore.cli._common import GlobalOptions

    return GlobalOptions(root=root)


# ---------------------------------------------------------------- 7. its own exports
def test_item7_export_refuses_what_import_would_refuse(
    run_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import alpstore.canonical

    deep = json.loads("[" * 300 + "]" * 300)
    with Store.open(run_root) as st:
        s = st.create_session(session_id="deep")
        # the archive refuses it now; an archive written before that can hold one
        monkeypatch.setattr(alpstore.canonical, "MAX_DEPTH", 1_000)
        s.append([{"role": "user", "content": deep}])
        monkeypatch.undo()
    out = tmp_path / "deep.json"
    res = run_cli("--root", str(run_root), "checkpoint", "export", "deep", "-o", str(out))
    assert res.code == 10 and "deeper than 256" in res.err, res
    assert not out.exists()


def test_item7_what_export_writes_import_reads(
    run_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size limit is one number for both sides (scaled down here: the real one is 4 GiB),
    and a streamed export at the limit is read back."""
    import alpstore.portable.exporting as exporting
    import alpstore.portable.importing as importing
    import alpstore.portable.reading as reading

    limit = 400_000
    monkeypatch.setattr(exporting, "MAX_DOCUMENT_BYTES", limit)
    monkeypatch.setattr(reading, "MAX_DOCUMENT_BYTES", limit)
    monkeypatch.setattr(exporting, "SMALL_EXPORT_BYTES", 0)  # stream even this small file
    with Store.open(run_root) as st:
        s = st.create_session(session_id="big")
        s.append([{"role": "user", "content": "x" * 1000 + str(i)} for i in range(300)])
        out = tmp_path / "big.json.zst"
        exporting.write_export(st, snapshot_of_head(st, s), out)
        assert out.stat().st_size < 20_000  # compresses well, yet decompresses to ~300 KB
        s.append([{"role": "user", "content": "y" * 200_000}])
        with pytest.raises(AlpstoreError, match="limit an import reads"):
            exporting.write_export(st, snapshot_of_head(st, s), tmp_path / "too.json.zst")
        assert not (tmp_path / "too.json.zst").exists()
    with Store.open(tmp_path / "other") as dst:
        done = importing.import_file(dst, out)
        assert done.entries == 300 and done.session.uuid == "big"
        monkeypatch.setattr(reading, "MAX_DOCUMENT_BYTES", limit // 2)  # and a bomb stops
        with pytest.raises(AlpstoreError, match="more than 200000 bytes"):
            importing.import_file(dst, out, fork=True)


# ---------------------------------------------------------------- 8. state
def test_item8_reimport_with_other_state_is_refused_and_same_state_says_so(
    run_root: Path, tmp_path: Path
) -> None:
    path = write(tmp_path / "a.json", mas_doc("s-8", kernel={"q": {"step": 1}, "run": {}}))
    first = run_cli("--root", str(run_root), "checkpoint", "import", str(path))
    assert first.code == 0 and first.out.startswith("imported session s-8"), first
    same = run_cli("--root", str(run_root), "checkpoint", "import", str(path))
    assert same.code == 0 and same.err == "", same
    assert "nothing imported" in same.out and "imported session" not in same.out
    with Store.open(run_root) as st:
        before = fingerprint(st)
    newer = write(tmp_path / "b.json", mas_doc("s-8", kernel={"q": {"step": 2}, "run": {}}))
    res = run_cli("--root", str(run_root), "checkpoint", "import", str(newer))
    assert res.code == 2 and res.out == "", res
    assert "different kernel or working memory" in res.err and "--fork" in res.err
    with Store.open(run_root) as st:
        assert fingerprint(st) == before
    forked = run_cli("--root", str(run_root), "checkpoint", "import", str(newer), "--fork")
    assert forked.code == 0, forked


# ---------------------------------------------------------------- 9. names and fields
def test_item9_names_labels_and_v2_fields_travel(run_root: Path, tmp_path: Path) -> None:
    fields = {
        "spec_revision": 7,
        "memory_seeds": [{"key": "style", "content": "terse"}],
        "runtime_profile": {"design_pattern": "react", "gov": {"profile": "strict"}},
    }
    src = write(tmp_path / "m.json", mas_doc("s-9", label="release", **fields))
    assert run_cli("--root", str(run_root), "checkpoint", "import", str(src)).code == 0
    with Store.open(run_root) as st, st.db.atomic() as conn:  # named here, on this machine
        conn.execute(update(sessions).where(sessions.c.uuid == "s-9").values(name="demo"))
    out = tmp_path / "out.json"
    res = run_cli("--root", str(run_root), "checkpoint", "export", "demo", "-o", str(out))
    assert res.code == 0, res
    doc = json.loads(out.read_text())
    assert doc["label"] == "release"
    assert {k: doc[k] for k in fields} == fields
    other = tmp_path / "other"
    imp = run_cli("--root", str(other), "checkpoint", "import", str(out))
    assert imp.code == 0, imp
    show = run_cli("--root", str(other), "session", "show", "demo")
    assert show.code == 0 and "Summarise README.md" in show.out, show
    again = tmp_path / "again.json"
    assert run_cli("--root", str(other), "checkpoint", "export", "demo", "-o", str(again)).code == 0
    back = json.loads(again.read_text())
    assert back["label"] == "release" and {k: back[k] for k in fields} == fields
    # a third archive where "demo" is taken: the imported one becomes demo-2, said on stderr
    third = tmp_path / "third"
    assert run_cli("--root", str(third), "session", "new", "--name", "demo").code == 0
    taken = run_cli("--root", str(third), "checkpoint", "import", str(out))
    assert taken.code == 0 and "demo-2" in taken.err and "demo-2" in taken.out, taken


def test_item9_session_import_name_twice_is_refused(run_root: Path, tmp_path: Path) -> None:
    source = _transcript(tmp_path / "conv.jsonl", 3)
    one = run_cli("--root", str(run_root), "session", "import", str(source), "--name", "demo")
    assert one.code == 0, one
    two = run_cli("--root", str(run_root), "session", "import", str(source), "--name", "demo")
    assert two.code == 2 and "already exists" in two.err, two
    with Store.open(run_root) as st:
        assert [i.name for i in st.list_sessions()] == ["demo"]
    # without --name, the file's stem is suffixed instead of duplicated
    three = run_cli("--root", str(run_root), "session", "import", str(source))
    four = run_cli("--root", str(run_root), "session", "import", str(source))
    assert three.code == 0 and four.code == 0 and "conv-2" in four.err, four
    with Store.open(run_root) as st:
        assert sorted(i.name or "" for i in st.list_sessions()) == ["conv", "conv-2", "demo"]


def test_an_import_packs_with_a_dictionary_of_its_first_frame(run_root: Path) -> None:
    """Issue 41: a deep import writes its small messages packed from the start, with a
    dictionary trained from its first frame inside its own transaction; nothing is left loose
    for a background training to recompress."""
    from alpstore.archive.frames import CODEC_PACKED
    from alpstore.archive.sql import AUTO_TRAIN_SAMPLES
    from alpstore.db.names import BLOB_MESSAGE
    from alpstore.db.tables import blobs, pack_frames, zstd_dicts

    n = AUTO_TRAIN_SAMPLES + 100  # enough small blobs to have triggered automatic training
    doc = mas_doc(messages=[{"role": "user", "content": f"message number {i}"} for i in range(n)])
    with Store.open(run_root) as st:
        import_document(st, doc, source_name="f.json")
        with st.db.read() as conn:
            assert conn.execute(select(func.count()).select_from(zstd_dicts)).scalar_one() == 1
            (dict_id,) = conn.execute(select(zstd_dicts.c.id)).one()
            frames = conn.execute(select(pack_frames.c.dict_id)).scalars().all()
            loose = conn.execute(
                select(func.count())
                .select_from(blobs)
                .where(blobs.c.codec != CODEC_PACKED, blobs.c.kind == BLOB_MESSAGE)
            ).scalar_one()
        assert frames and set(frames) == {dict_id}
        assert loose == 0
        assert st.archive.wait_for_training(timeout=0)  # no training was started


def test_imports_one_after_another_share_the_first_ones_dictionary(
    run_root: Path, tmp_path: Path
) -> None:
    """Issue 41: the second import of a process (a folder of transcripts) packs with the
    dictionary the first one trained and committed, not one of its own each."""
    from alpstore.db.tables import pack_frames, zstd_dicts
    from alpstore.importers import import_history, parse_history

    with Store.open(run_root) as st:
        for i in range(3):
            source = tmp_path / f"t{i}.jsonl"
            lines = [
                json.dumps({"role": "user" if k % 2 == 0 else "assistant", "content": f"{i} {k}"})
                for k in range(200)
            ]
            source.write_text("\n".join(lines) + "\n", encoding="utf-8")
            import_history(st, parse_history(source), name=f"t{i}")
        with st.db.read() as conn:
            assert conn.execute(select(func.count()).select_from(zstd_dicts)).scalar_one() == 1
            assert set(conn.execute(select(pack_frames.c.dict_id)).scalars().all()) == {
                conn.execute(select(zstd_dicts.c.id)).scalar_one()
            }
