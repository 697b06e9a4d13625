"""What the inspector's server was started with: the store it reads, its token, port and hosts.

A module of its own so that the pages (:mod:`alpstore.ui.pages`) and the application
(:mod:`alpstore.ui.app`) both depend on it, and not on each other.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alpstore.store import Store


@dataclass
class Settings:
    """What the server was started with."""

    store: Store
    token: str
    port: int
    hosts: list[str]
    alp_home: Path | None = None
    label: str = ""

    @property
    def cookie(self) -> str:
        """The cookie carrying the token (one per port: two inspectors do not collide)."""
        return f"alpstore_ui_{self.port}"


def new_token() -> str:
    """A random token for one server run."""
    return secrets.token_urlsafe(24)
