"""A/B of bulk blob decoding between an older checkout and this one, in one process: the old
tree's ``SqlArchive.decode_rows`` and ``archive/batch.decode_lean`` are loaded from its files
beside this tree's, and the two alternate (old, new, new, old, …) on the same archive, so both
see the same machine at the same moments. CPU time of this process (``time.process_time``).

    python benchmarks/ab_decode.py --old /tmp/old-checkout [--turns 1000] [--rounds 200]
        [--only native|langgraph]

``--old`` is a tree of an earlier commit, e.g. ``git archive 0816eab | tar -x -C /tmp/old``.

Two archives: a native session of ``--turns`` generated turns (``commit_turn``; the dictionary
trained as it would be automatically), timed on ``decode_rows`` of its head's rows and on
``Store.hydrate`` of its last checkpoint (``decode_rows`` is on that path); and a LangGraph
thread of as many steps written by ``AlpstoreSaver``, timed on ``decode_lean`` of its head's
lean rows and on ``_lgdb.load_head`` (a cold read's rebuild). The collector runs before each
timed call and is off during it. Prints each timing's median and fastest for both trees, the
ratio of the medians and the median of the per-pair ratios (new ÷ old).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._util import conversation_turns


def load_old(tree: Path, name: str, rel: str) -> types.ModuleType:
    """A module of the old tree, loaded from its file under a name of its own."""
    spec = importlib.util.spec_from_file_location(name, tree / rel)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def ab(label: str, old: Callable[[], Any], new: Callable[[], Any], rounds: int) -> str:
    """Alternate ``old`` and ``new`` (ABBA), check they agree, and summarise CPU times."""
    assert old() == new(), f"{label}: the two trees disagree"
    times: dict[str, list[float]] = {"old": [], "new": []}
    for i in range(rounds):
        order = (("old", old), ("new", new)) if i % 2 == 0 else (("new", new), ("old", old))
        for name, fn in order:
            gc.collect()
            gc.disable()  # a collection the other side's garbage started is not timed here
            try:
                start = time.process_time()
                fn()
                times[name].append(time.process_time() - start)
            finally:
                gc.enable()
    ratios = [n / o for o, n in zip(times["old"], times["new"], strict=True) if o > 0]
    old_ms, new_ms = (1000 * statistics.median(times[k]) for k in ("old", "new"))
    return (
        f"{label}: old {old_ms:.2f} ms, new {new_ms:.2f} ms CPU (medians of {rounds}; fastest "
        f"{1000 * min(times['old']):.2f} and {1000 * min(times['new']):.2f}); new/old: "
        f"{new_ms / old_ms:.3f} of the medians, {statistics.median(ratios):.3f} the median pair"
    )


def native(old_sql: types.ModuleType, turns: int, rounds: int) -> list[str]:
    from alpstore.archive.sql import SqlArchive
    from alpstore.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Path(tmp))
        session = store.create_session(name="bench")
        for turn in conversation_turns(turns):
            session.commit_turn(turn)
        store.archive.train_dictionary(only_if_none=True)
        archive = store.archive
        checkpoint = session.checkpoints()[-1]
        old = types.MethodType(old_sql.SqlArchive.decode_rows, archive)
        new = types.MethodType(SqlArchive.decode_rows, archive)
        with store.db.read() as conn:
            rows = store.views.read_blob_rows(conn, session.head)
            codecs = sorted({int(r[4]) for r in rows})
            out = [f"native session: {turns} turns, {len(rows)} blobs, codecs {codecs}"]
            out.append(
                ab(
                    "decode_rows",
                    lambda: old(conn, rows, verify=False),
                    lambda: new(conn, rows, verify=False),
                    rounds,
                )
            )

        def hydrate(fn: Any) -> Callable[[], Any]:
            def run() -> Any:
                archive.decode_rows = fn  # type: ignore[method-assign]
                return store.hydrate(checkpoint)

            return run

        label = "Store.hydrate (last checkpoint)"
        out.append(ab(label, hydrate(old), hydrate(new), max(20, rounds // 4)))
        store.close()
    return out


def langgraph(old_batch: types.ModuleType, turns: int, rounds: int) -> list[str]:
    from alpstore.archive import batch
    from alpstore.integrations import _lgdb
    from benchmarks.bench_langgraph import conversation
    from benchmarks.bench_saver import alpstore_saver, write_thread

    inputs, replies, _raw = conversation(turns)
    with alpstore_saver(None) as (saver, _root):
        write_thread(saver, inputs, replies, turns)
        store = saver.store
        store.archive.train_dictionary(only_if_none=True)
        head = store.get_session("langgraph:bench").head
        with store.db.read() as conn:
            rows = store.views.read_lean_rows(conn, head)
            codecs = sorted({int(r[3]) for r in rows})
            out = [f"langgraph thread: {turns} steps, {len(rows)} blobs, codecs {codecs}"]
            out.append(
                ab(
                    "decode_lean",
                    lambda: old_batch.decode_lean(store.archive, conn, rows),
                    lambda: batch.decode_lean(store.archive, conn, rows),
                    rounds,
                )
            )

            def load(fn: Any) -> Callable[[], Any]:
                def run() -> Any:
                    _lgdb.decode_lean = fn  # type: ignore[attr-defined]
                    return len(_lgdb.load_head(store, conn, head)[0])

                return run

            out.append(
                ab(
                    "_lgdb.load_head (cold rebuild)",
                    load(old_batch.decode_lean),
                    load(batch.decode_lean),
                    max(20, rounds // 4),
                )
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True, help="the older checkout")
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--only", choices=("native", "langgraph"), help="one of the two archives")
    args = parser.parse_args(argv)
    old_sql = load_old(args.old, "_old_alpstore_sql", "alpstore/archive/sql.py")
    old_batch = load_old(args.old, "_old_alpstore_batch", "alpstore/archive/batch.py")
    if args.only != "langgraph":
        print("\n".join(native(old_sql, args.turns, args.rounds)), flush=True)
    if args.only != "native":
        print("\n".join(langgraph(old_batch, args.turns, args.rounds)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
