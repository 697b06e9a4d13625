"""Unique session names: a unique index on ``sessions.name`` (NULL names may repeat).

A name is how the framework adapters find their session (``openai-agents:<id>``,
``langgraph:<thread>``), so two sessions with one name split a conversation. Archives written
before this revision may hold duplicates (the race this index closes created them): the oldest
session (lowest id) keeps the name, every later one is renamed ``<name> [dup <id>]`` (cut to fit
200 characters) and gets a ``renamed`` row in ``session_events`` saying from what, to what and
why. Nothing else changes, so no history is lost and the renamed sessions stay listable.
Downgrading drops the index; the renames stay (their events say what they were).

Revision ID: 0005
Revises: 0003
"""

from __future__ import annotations

import json
import time

import sqlalchemy as sa

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

NAME_LIMIT = 200
INDEX = "uq_sessions_name"


def _free_name(conn: sa.Connection, name: str, session_id: int, taken: set[str]) -> str:
    """``<name> [dup <id>]`` cut to fit, with a counter in the rare case that is taken too."""
    n = 0
    while True:
        suffix = f" [dup {session_id}]" if n == 0 else f" [dup {session_id}.{n}]"
        candidate = name[: NAME_LIMIT - len(suffix)] + suffix
        if (
            candidate not in taken
            and not conn.execute(
                sa.text("SELECT 1 FROM sessions WHERE name = :n"), {"n": candidate}
            ).first()
        ):
            return candidate
        n += 1


def rename_duplicates(conn: sa.Connection) -> list[tuple[int, str, str]]:
    """Rename every session but the oldest of each duplicated name; returns the renames."""
    dup_names = [
        r[0]
        for r in conn.execute(
            sa.text(
                "SELECT name FROM sessions WHERE name IS NOT NULL GROUP BY name "
                "HAVING COUNT(*) > 1 ORDER BY name"
            )
        )
    ]
    renames: list[tuple[int, str, str]] = []
    taken: set[str] = set()
    now = time.time()
    for name in dup_names:
        ids = [
            int(r[0])
            for r in conn.execute(
                sa.text("SELECT id FROM sessions WHERE name = :n ORDER BY id"), {"n": name}
            )
        ]
        for session_id in ids[1:]:
            new = _free_name(conn, name, session_id, taken)
            taken.add(new)
            conn.execute(
                sa.text("UPDATE sessions SET name = :new WHERE id = :id"),
                {"new": new, "id": session_id},
            )
            detail = {"from": name, "to": new, "reason": "duplicate session name", "by": "0005"}
            conn.execute(
                sa.text(
                    "INSERT INTO session_events (session_id, checkpoint_id, kind, detail, "
                    "created_at) VALUES (:sid, NULL, 'renamed', :detail, :at)"
                ),
                {"sid": session_id, "detail": json.dumps(detail, sort_keys=True), "at": now},
            )
            renames.append((session_id, name, new))
    return renames


def upgrade() -> None:
    rename_duplicates(op.get_bind())
    op.create_index(INDEX, "sessions", ["name"], unique=True)


def downgrade() -> None:
    op.drop_index(INDEX, table_name="sessions")
