"""Throwaway PostgreSQL schemas for tests and benchmarks: one archive per schema of one database."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine
from sqlalchemy.engine import make_url


def schema_url(base: str, schema: str) -> str:
    """``base`` with ``search_path`` set to ``schema`` (so an archive opened there lives in it)."""
    url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


@contextmanager
def fresh_schema(admin: Engine, base: str, prefix: str) -> Iterator[str]:
    """Create an empty schema named ``prefix`` + a random suffix, yield its URL, drop it after.

    ``admin`` is an engine on ``base`` allowed to create and drop schemas.
    """
    # os.urandom, not uuid.uuid4: a suite that patches uuid4 for its own ids (LangGraph's
    # test_large_cases) would see one drawn by this fixture
    schema = f"{prefix}{os.urandom(8).hex()}"
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    try:
        yield schema_url(base, schema)
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql("SET lock_timeout = '10s'")
            conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
