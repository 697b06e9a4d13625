"""alpstore: an embedded, content-addressed storage engine for AI-agent sessions."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
