"""LangGraph checkpointer tables: threads mapped to sessions, interned runs, checkpoints mapped
to alpstore checkpoints (compressed state + blob references), pending writes per task.

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
        "lg_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=255), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lg_runs")),
        sa.UniqueConstraint("run_id", name=op.f("uq_lg_runs_run_id")),
        comment="LangGraph run ids, interned (checkpoints refer to them by number).",
    )
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
        "lg_writes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("thread_ref", sa.Integer(), nullable=False),
        sa.Column("checkpoint_id", sa.LargeBinary(), nullable=False),
        sa.Column("task_id", sa.LargeBinary(), nullable=False),
        sa.Column("codec", sa.SmallInteger(), nullable=False),
        sa.Column("dict_id", sa.Integer(), nullable=True),
        sa.Column("raw_size", sa.Integer(), nullable=False),
        sa.Column("state", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dict_id"], ["zstd_dicts.id"], name=op.f("fk_lg_writes_dict_id_zstd_dicts")
        ),
        sa.ForeignKeyConstraint(
            ["thread_ref"], ["lg_threads.id"], name=op.f("fk_lg_writes_thread_ref_lg_threads")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lg_writes")),
        sa.UniqueConstraint(
            "thread_ref",
            "checkpoint_id",
            "task_id",
            name=op.f("uq_lg_writes_thread_ref_checkpoint_id_task_id"),
        ),
        comment="One task's pending writes on a LangGraph checkpoint (packed; blobs in items).",
    )
    op.create_table(
        "lg_checkpoints",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("thread_ref", sa.Integer(), nullable=False),
        sa.Column("checkpoint_id", sa.LargeBinary(), nullable=False),
        sa.Column("parent_checkpoint_id", sa.LargeBinary(), nullable=True),
        sa.Column("alp_checkpoint_id", sa.Integer(), nullable=False),
        sa.Column("run_ref", sa.Integer(), nullable=True),
        sa.Column("codec", sa.SmallInteger(), nullable=False),
        sa.Column("dict_id", sa.Integer(), nullable=True),
        sa.Column("raw_size", sa.Integer(), nullable=False),
        sa.Column("state", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["alp_checkpoint_id"],
            ["checkpoints.id"],
            name=op.f("fk_lg_checkpoints_alp_checkpoint_id_checkpoints"),
        ),
        sa.ForeignKeyConstraint(
            ["dict_id"], ["zstd_dicts.id"], name=op.f("fk_lg_checkpoints_dict_id_zstd_dicts")
        ),
        sa.ForeignKeyConstraint(
            ["run_ref"], ["lg_runs.id"], name=op.f("fk_lg_checkpoints_run_ref_lg_runs")
        ),
        sa.ForeignKeyConstraint(
            ["thread_ref"], ["lg_threads.id"], name=op.f("fk_lg_checkpoints_thread_ref_lg_threads")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lg_checkpoints")),
        sa.UniqueConstraint(
            "thread_ref", "checkpoint_id", name=op.f("uq_lg_checkpoints_thread_ref_checkpoint_id")
        ),
        comment="A LangGraph checkpoint: its alpstore checkpoint (messages view), packed state.",
    )
    with op.batch_alter_table("lg_checkpoints", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_lg_checkpoints_alp_checkpoint_id"), ["alp_checkpoint_id"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_lg_checkpoints_run_ref"), ["run_ref"], unique=False)

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
        comment="The blobs (messages, large values) of a task's pending writes, in order.",
        sqlite_with_rowid=False,
    )
    with op.batch_alter_table("lg_write_items", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_lg_write_items_blob_id"), ["blob_id"], unique=False)

    op.create_table(
        "lg_checkpoint_blobs",
        sa.Column("checkpoint_ref", sa.Integer(), nullable=False),
        sa.Column("blob_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["blob_id"], ["blobs.id"], name=op.f("fk_lg_checkpoint_blobs_blob_id_blobs")
        ),
        sa.ForeignKeyConstraint(
            ["checkpoint_ref"],
            ["lg_checkpoints.id"],
            name=op.f("fk_lg_checkpoint_blobs_checkpoint_ref_lg_checkpoints"),
        ),
        sa.PrimaryKeyConstraint("checkpoint_ref", "blob_id", name=op.f("pk_lg_checkpoint_blobs")),
        comment="The content-addressed channel values a LangGraph checkpoint refers to.",
        sqlite_with_rowid=False,
    )
    with op.batch_alter_table("lg_checkpoint_blobs", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_lg_checkpoint_blobs_blob_id"), ["blob_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("lg_checkpoint_blobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lg_checkpoint_blobs_blob_id"))

    op.drop_table("lg_checkpoint_blobs")
    with op.batch_alter_table("lg_write_items", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lg_write_items_blob_id"))

    op.drop_table("lg_write_items")
    with op.batch_alter_table("lg_checkpoints", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lg_checkpoints_run_ref"))
        batch_op.drop_index(batch_op.f("ix_lg_checkpoints_alp_checkpoint_id"))

    op.drop_table("lg_checkpoints")
    op.drop_table("lg_writes")
    with op.batch_alter_table("lg_threads", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lg_threads_session_id"))

    op.drop_table("lg_threads")
    op.drop_table("lg_runs")
