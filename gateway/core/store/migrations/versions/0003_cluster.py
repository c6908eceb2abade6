"""The cluster: nodes and their beats, task owners and epochs, side-effect intents, and an
index to read task ends by time.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_revocations_at", "revocations", ["revoked_at"])
    op.create_table(
        "nodes",
        sa.Column("node_id", sa.String(64), primary_key=True),
        sa.Column("incarnation", sa.String(64), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("beat_at", sa.Float, nullable=False),
    )
    op.create_table(
        "task_owners",
        sa.Column("task_id", sa.String(64), primary_key=True),
        sa.Column("node_id", sa.String(64)),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("revoked", sa.Integer, nullable=False, server_default="0"),
        sa.Column("browser", sa.Integer, nullable=False, server_default="0"),
        sa.Column("changed_at", sa.Float, nullable=False),
    )
    op.create_table(
        "call_intents",
        sa.Column("task_id", sa.String(64), primary_key=True),
        sa.Column("tool", sa.String(128), primary_key=True),
        sa.Column("key", sa.String(256), primary_key=True),
        sa.Column("call_id", sa.String(64), nullable=False),
        sa.Column("node_id", sa.String(64), nullable=False),
        sa.Column("epoch", sa.Integer, nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("call_intents")
    op.drop_table("task_owners")
    op.drop_table("nodes")
    op.drop_index("ix_revocations_at", "revocations")
