"""Which backend this pass of the suite stores its archives on.

`scripts/test` runs the whole suite twice when a PostgreSQL server is available: once with every
run root's archive in its SQLite file (the default), once with ``ALPSTORE_TEST_BACKEND=postgresql``,
where every run root's archive lives in a PostgreSQL schema of its own instead. Tests name run
roots, never databases, so the PostgreSQL pass maps each run root to a fresh schema the first time
an archive is opened there — in this process (``open_database`` is wrapped) and in the `alpstore`
subprocesses the tests start (``run_cli`` passes the root's URL in ``ALPSTORE_DATABASE_URL``).

Schemas made while a test runs (by it or by processes it started) are dropped when it ends; those
made by module-scoped fixtures at the end of the session.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

SUITE_BACKEND_ENV = "ALPSTORE_TEST_BACKEND"
SUITE_BACKENDS = ("sqlite", "postgresql")
DATABASE_URL_ENV = "ALPSTORE_DATABASE_URL"


def suite_backend() -> str:
    """``sqlite`` (default) or ``postgresql``: where run roots keep their archives in this pass."""
    value = os.environ.get(SUITE_BACKEND_ENV, "").strip().lower() or "sqlite"
    if value not in SUITE_BACKENDS:
        raise ValueError(f"{SUITE_BACKEND_ENV}={value!r}: expected one of {SUITE_BACKENDS}")
    return value


class RootSchemas:
    """Run root → a PostgreSQL schema of its own.

    The schema's name is derived from the root's path (and a per-session nonce), so a forked child
    and its parent agree on it without talking; it is created on first use.
    """

    def __init__(self, admin: Any, base_url: str) -> None:
        self.admin = admin
        self.base_url = base_url
        self.prefix = f"t{uuid.uuid4().hex[:8]}_"

    def schema_for(self, root: Path | str) -> str:
        key = str(Path(root).expanduser().resolve())
        return self.prefix + hashlib.blake2b(key.encode(), digest_size=8).hexdigest()

    def url_for(self, root: Path | str) -> str:
        """The URL of ``root``'s schema, creating the schema the first time."""
        from sqlalchemy import exc

        from alpstore.testing.postgres import schema_url

        schema = self.schema_for(root)
        # two processes may race to create it
        with contextlib.suppress(exc.IntegrityError), self.admin.begin() as conn:
            conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        return schema_url(self.base_url, schema)

    def existing(self) -> set[str]:
        """The schemas of this session that exist now."""
        with self.admin.connect() as conn:
            rows = conn.exec_driver_sql(
                "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %(p)s)",
                {"p": self.prefix},
            ).all()
        return {row[0] for row in rows}

    def drop_except(self, keep: set[str]) -> None:
        """Drop this session's schemas but ``keep`` (those of longer-lived fixtures)."""
        from sqlalchemy import exc

        for schema in sorted(self.existing() - keep):
            for attempt in range(3):
                try:
                    with self.admin.begin() as conn:
                        conn.exec_driver_sql("SET lock_timeout = '10s'")
                        conn.exec_driver_sql(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
                    break
                except exc.OperationalError as err:
                    # a test's last background transaction (a packer, a trainer) still reading
                    # in the schema while the DROP locks its relations one by one: PostgreSQL
                    # breaks the deadlock by aborting the DROP, which may simply run again
                    if "deadlock detected" not in str(err) or attempt == 2:
                        raise
                    time.sleep(0.5)


ROOT_SCHEMAS: list[RootSchemas] = []
"""The active mapping during a PostgreSQL pass (empty otherwise)."""


def database_env_for(root: Path | str) -> dict[str, str]:
    """Environment entries that make an `alpstore` subprocess use ``root``'s archive.

    Empty on the SQLite pass (the subprocess finds the SQLite file in the run root itself).
    """
    if not ROOT_SCHEMAS:
        return {}
    return {DATABASE_URL_ENV: ROOT_SCHEMAS[0].url_for(root)}


def root_of_cli_args(args: tuple[str, ...] | list[str], cwd: Path | None) -> Path:
    """The run root an `alpstore` command line names (``--root``, else the working directory)."""
    items = list(args)
    for i, arg in enumerate(items):
        if arg == "--":
            break
        if arg == "--root" and i + 1 < len(items):
            return Path(items[i + 1])
        if arg.startswith("--root="):
            return Path(arg.split("=", 1)[1])
    return cwd if cwd is not None else Path.cwd()


def sqlite_only(reason: str) -> None:
    """Skip the calling test or fixture on the PostgreSQL pass (it works on the SQLite file)."""
    import pytest

    if suite_backend() != "sqlite":
        pytest.skip(f"SQLite only: {reason}")


def database_url_for_roots() -> Callable[[Path], str] | None:
    """On the PostgreSQL pass, run root → its schema's URL (for code that starts its own
    processes); None on the SQLite pass."""
    if not ROOT_SCHEMAS:
        return None
    return ROOT_SCHEMAS[0].url_for
