"""A writer process for the concurrency tests: one session, N turns, a checkpoint per turn.

Run as ``python writer.py ROOT URL|- INDEX TURNS OUT_JSON BARRIER_DIR``. Every turn appends a
message shared by every writer (same content, so the same blob) and one of its own, and
checkpoints with a kernel state that is also shared; every tenth turn it stores the next shared
messages ahead of time, unreferenced, so a concurrent GC may sweep them just before a writer
reuses them. It writes the checkpoints the archive acknowledged to OUT_JSON.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

SHARED = 40


def shared_message(t: int) -> dict[str, Any]:
    return {"role": "user", "content": f"shared question {t % SHARED}: " + "context " * 20}


def own_message(index: int, t: int) -> dict[str, Any]:
    return {"role": "assistant", "content": f"writer {index} answers turn {t}"}


def kernel(t: int) -> dict[str, Any]:
    return {"plan": f"step {t % 7}"}


def wait_for_go(barrier: Path, index: int) -> None:
    (barrier / f"ready-{index}").touch()
    deadline = time.monotonic() + 120
    while not (barrier / "go").exists():
        if time.monotonic() > deadline:
            raise SystemExit("writer: no go signal within 120 s")
        time.sleep(0.005)


def main(argv: list[str]) -> int:
    root, url, index, turns, out, barrier = argv
    from alpstore.store import Store

    idx, n = int(index), int(turns)
    acked: list[dict[str, Any]] = []
    result: dict[str, Any] = {"acked": acked, "session": None, "error": None}
    try:
        store = Store.open(Path(root), url=None if url == "-" else url)
        session = store.create_session(name=f"writer-{idx}")
        result["session"] = session.uuid
        wait_for_go(Path(barrier), idx)
        for t in range(n):
            if t % 10 == 0:
                store.archive.put_many([shared_message(t + k) for k in range(10, 13)])
                # the window the GC test is about: on a fast machine the turns that follow
                # took a few milliseconds, and no collection ever ran inside it
                time.sleep(0.04)
            ck = session.commit_turn([shared_message(t), own_message(idx, t)], kernel=kernel(t))
            acked.append({"id": ck.id, "seq": ck.seq, "turn": t})
        store.close()
    except BaseException as err:  # report, then fail the process
        result["error"] = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
    Path(out).write_text(json.dumps(result))
    return 1 if result["error"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
