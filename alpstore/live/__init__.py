"""A running agent's session (``LiveSession``): its policy, in-process context and opening.
May import alpstore.portable, policy, sessions, core (typing) and below; never alpstore.store.
"""

from alpstore.live.context import MAX_CONTEXT_DEPTH, Context, LiveBacktrack, Mark, model_message
from alpstore.live.opening import (
    Opened,
    Prepared,
    open_live_session,
    open_prepared,
    open_with_manifest,
    policy_of_session,
    prepare_manifest,
    resolve_policy,
    session_retention,
)
from alpstore.live.session import MID_TURN_EVENTS, LiveSession

__all__ = [
    "MAX_CONTEXT_DEPTH",
    "MID_TURN_EVENTS",
    "Context",
    "LiveBacktrack",
    "LiveSession",
    "Mark",
    "Opened",
    "Prepared",
    "model_message",
    "open_live_session",
    "open_prepared",
    "open_with_manifest",
    "policy_of_session",
    "prepare_manifest",
    "resolve_policy",
    "session_retention",
]
