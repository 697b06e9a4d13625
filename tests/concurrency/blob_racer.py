"""A process that stores the same documents as its siblings, at the same moment, many times.

Run as ``python blob_racer.py ROOT URL|- INDEX ROUNDS OUT_JSON BARRIER_DIR``: each round stores
every document in one ``put_many``, in an order of its own, so that every insert races another
process's insert of the same digest.
"""

from __future__ import annotations

import json
import random
import sys
import traceback
from pathlib import Path
from typing import Any

from writer import wait_for_go

DOCS = 300


def documents() -> list[dict[str, Any]]:
    return [
        {"role": "tool", "content": f"shared output {i} " + "x" * (i % 50)} for i in range(DOCS)
    ]


def main(argv: list[str]) -> int:
    root, url, index, rounds, out, barrier = argv
    from alpstore.archive.sql import SqlArchive
    from alpstore.db import open_database

    result: dict[str, Any] = {"digests": None, "error": None}
    try:
        db = open_database(root=Path(root), url=None if url == "-" else url)
        archive = SqlArchive(db, auto_train=False)
        docs = documents()
        rng = random.Random(int(index))
        wait_for_go(Path(barrier), int(index))
        for _ in range(int(rounds)):
            order = list(range(DOCS))
            rng.shuffle(order)
            digests = archive.put_many([docs[i] for i in order])
            by_doc = dict(zip(order, digests, strict=True))
            result["digests"] = [by_doc[i].hex() for i in range(DOCS)]
        db.close()
    except BaseException as err:
        result["error"] = f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
    Path(out).write_text(json.dumps(result))
    return 1 if result["error"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
