"""A process that stores the same new content as its siblings at the same moment: by importing
a session file, or as a live writer committing its turns.

Run as ``python import_racer.py ROOT URL|- INDEX WHAT OUT_JSON BARRIER_DIR``: WHAT is a session
file to import, or ``write:N`` for N turns of :func:`turn_messages` committed one by one.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

from writer import wait_for_go


def turn_messages(t: int) -> list[dict[str, Any]]:
    """Turn ``t``'s two messages: the same in every session file and every writer."""
    return [
        {"role": "user", "content": f"race question {t}: " + "context " * 12},
        {"role": "assistant", "content": f"race answer {t}: " + "words " * 10},
    ]


def main(argv: list[str]) -> int:
    root, url, index, what, out, barrier = argv
    from alpstore.portable.travel_import import import_session_file
    from alpstore.store import Store

    result: dict[str, Any] = {"error": None, "inserted": None}
    try:
        store = Store.open(Path(root), url=None if url == "-" else url)
        session = store.create_session(name=f"live-{index}") if what.startswith("write:") else None
        wait_for_go(Path(barrier), int(index))
        if session is not None:
            for t in range(int(what.split(":", 1)[1])):
                session.commit_turn(turn_messages(t), kernel={"turn": t})
        else:
            result["inserted"] = import_session_file(store, Path(what)).inserted
        store.close()
    except BaseException as err:  # report, then fail the process
        result["error"] = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
    Path(out).write_text(json.dumps(result))
    return 1 if result["error"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
