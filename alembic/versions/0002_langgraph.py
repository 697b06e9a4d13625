"""LangGraph checkpointer tables: threads mapped to sessions, checkpoints mapped to alpstore
checkpoints, channel values by version, pending writes (message lists one blob per message).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lg_threads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("thread_id", sa.String(length=255), nullable=False),
        sa.Column("checkpoint_ns", sa.String(length=255), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.id"], name=op.f("fk_lg_threads_session_id_sessions")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lg_threads")),
        sa.UniqueConstraint(
            "thread_id", "checkpoint_ns", name=op.f("uq_lg_threads_thread_id_checkpoint_ns")
        ),
        comment="A LangGraph thread + namespace, mapped to the alpstore session holding it.",
    )
    with op.batch_alter_table("lg_threads", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_lg_threads_session_id"), ["session_id"], unique=False)

    op.create_table(
        "lg_channel_values",
        sa.Column("thread_ref", sa.Integer(), nullable=False),
        sa.Column("channel", sa.String(length=255), nullable=False),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.SmallInteger(), nullable=False),
        sa.Column("blob_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["blob_id"], ["blobs.id"], name=op.f("fk_lg_channel_values_blob_id_blobs")
        ),
        sa.ForeignKeyConstraint(
            ["thread_ref"],
            ["lg_threads.id"],
            name=op.f("fk_lg_channel_values_thread_ref_lg_threads"),
        ),
        sa.PrimaryKeyConstraint(
            "thread_ref", "channel", "version", name=op.f("pk_lg_channel_values")
        ),
        comment="A channel's value at one version, stored content-addressed (kind: json|serde|…).",
        sqlite_with_rowid=False,
    )
    with op.batch_alter_table("lg_channel_values", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_lg_channel_values_blob_id"), ["blob_id"], unique=False)

    op.create_table(
        "lg_writes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("thread_ref", sa.Integer(), nullable=False),
        sa.Column("checkpoint_id", sa.String(length=64), nullable=False),
        sa.Column("task_id", sa.String(length=255), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("channel", sa.String(length=255), nullable=False),
        sa.Column("task_path", sa.Text(), nullable=False),
        sa.Column("kind", sa.SmallInteger(), nullable=False),
        sa.Column("blob_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(["blob_id"], ["blobs.id"], name=op.f("fk_lg_writes_blob_id_blobs")),
        sa.ForeignKeyConstraint(
            ["thread_ref"], ["lg_threads.id"], name=op.f("fk_lg_writes_thread_ref_lg_threads")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lg_writes")),
        sa.UniqueConstraint(
            "thread_ref",
            "checkpoint_id",
            "task_id",
            "idx",
            name=op.f("uq_lg_writes_thread_ref_checkpoint_id_task_id_idx"),
        ),
        comment="Pending writes of a LangGraph checkpoint; one blob per message in message lists.",
    )
    with op.batch_alter_table("lg_writes", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_lg_writes_blob_id"), ["blob_id"], unique=False)

    op.create_table(
        "lg_checkpoints",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("thread_ref", sa.Integer(), nullable=False),
        sa.Column("checkpoint_id", sa.String(length=64), nullable=False),
        sa.Column("parent_checkpoint_id", sa.String(length=64), nullable=True),
        sa.Column("alp_checkpoint_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.ForeignKeyConstraint(
            ["alp_checkpoint_id"],
            ["checkpoints.id"],
            name=op.f("fk_lg_checkpoints_alp_checkpoint_id_checkpoints"),
        ),
        sa.ForeignKeyConstraint(
            ["thread_ref"], ["lg_threads.id"], name=op.f("fk_lg_checkpoints_thread_ref_lg_threads")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lg_checkpoints")),
        sa.UniqueConstraint(
            "thread_ref", "checkpoint_id", name=op.f("uq_lg_checkpoints_thread_ref_checkpoint_id")
        ),
        comment="A LangGraph checkpoint: its alpstore checkpoint (view + kernel blob) and parent.",
    )
    with op.batch_alter_table("lg_checkpoints", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_lg_checkpoints_alp_checkpoint_id"), ["alp_checkpoint_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_lg_checkpoints_run_id"), ["run_id"], unique=False)

    op.create_table(
        "lg_write_items",
        sa.Column("write_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("blob_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["blob_id"], ["blobs.id"], name=op.f("fk_lg_write_items_blob_id_blobs")
        ),
        sa.ForeignKeyConstraint(
            ["write_id"], ["lg_writes.id"], name=op.f("fk_lg_write_items_write_id_lg_writes")
        ),
        sa.PrimaryKeyConstraint("write_id", "position", name=op.f("pk_lg_write_items")),
        comment="The messages of a pending write that is a list of messages, one blob each.",
        sqlite_with_rowid=False,
    )
    with op.batch_alter_table("lg_write_items", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_lg_write_items_blob_id"), ["blob_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("lg_write_items", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lg_write_items_blob_id"))

    op.drop_table("lg_write_items")
    with op.batch_alter_table("lg_checkpoints", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lg_checkpoints_run_id"))
        batch_op.drop_index(batch_op.f("ix_lg_checkpoints_alp_checkpoint_id"))

    op.drop_table("lg_checkpoints")
    with op.batch_alter_table("lg_writes", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lg_writes_blob_id"))

    op.drop_table("lg_writes")
    with op.batch_alter_table("lg_channel_values", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lg_channel_values_blob_id"))

    op.drop_table("lg_channel_values")
    with op.batch_alter_table("lg_threads", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lg_threads_session_id"))

    op.drop_table("lg_threads")
