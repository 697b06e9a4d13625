"""Sessions: their records (what reads return) and the ``Session`` handle that moves a head.
May import alpstore.archive, views, policy, rules, db and below; never the store (a handle
sees it through ``SessionHost``, a protocol the store satisfies).
"""

from alpstore.sessions.records import (
    DEFAULT_RETENTION_N,
    RETENTION_MODES,
    BacktrackInfo,
    CheckpointInfo,
    Entry,
    Retention,
    SessionInfo,
    Status,
    count_user_turns,
    default_label,
    event_detail,
    new_session_uuid,
    steering_message,
)
from alpstore.sessions.session import Session, manifest_blob

__all__ = [
    "DEFAULT_RETENTION_N",
    "RETENTION_MODES",
    "BacktrackInfo",
    "CheckpointInfo",
    "Entry",
    "Retention",
    "Session",
    "SessionInfo",
    "Status",
    "count_user_turns",
    "default_label",
    "event_detail",
    "manifest_blob",
    "new_session_uuid",
    "steering_message",
]
