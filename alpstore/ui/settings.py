"""What the inspector's server was started with: the store it reads, its token, port and hosts.

A module of its own so that the pages (:mod:`alpstore.ui.pages`) and the application
(:mod:`alpstore.ui.app`) both depend on it, and not on each other.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from alpstore.store import Store


OPEN_CODE_SECONDS = 120.0
"""How long the code ``ui --open`` hands the browser stays good (a cold browser start)."""


@dataclass
class Settings:
    """What the server was started with."""

    store: Store
    token: str
    port: int
    hosts: list[str]
    alp_home: Path | None = None
    label: str = ""
    open_code: str | None = None
    """A one-time code for ``ui --open`` (the browser's command line, which other local users
    can read, carries it instead of the token): exchanged once for the cookie, before
    :attr:`open_code_expires`."""
    open_code_expires: float = 0.0

    def new_open_code(self, lifetime: float = OPEN_CODE_SECONDS) -> str:
        """Make (and return) the one-time code that replaces any earlier one."""
        self.open_code = secrets.token_urlsafe(24)
        self.open_code_expires = time.monotonic() + lifetime
        return self.open_code

    def take_open_code(self, given: str) -> bool:
        """True, once, for the current code before it expires; it is gone afterwards."""
        code = self.open_code
        if code is None or not secrets.compare_digest(given.encode(), code.encode()):
            return False
        self.open_code = None
        return time.monotonic() < self.open_code_expires

    @property
    def cookie(self) -> str:
        """The cookie carrying the token (one per port: two inspectors do not collide)."""
        return f"alpstore_ui_{self.port}"


def new_token() -> str:
    """A random token for one server run."""
    return secrets.token_urlsafe(24)
