"""The tables of the first release: tasks, revocations, evidence, artifacts, idempotency.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("task_id", sa.String(64), primary_key=True),
        sa.Column("org_id", sa.String(128), nullable=False),
        sa.Column("actor_id", sa.String(128), nullable=False),
        sa.Column("identity", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    op.create_index("ix_tasks_org", "tasks", ["org_id"])
    op.create_table(
        "revocations",
        sa.Column("task_id", sa.String(64), primary_key=True),
        sa.Column("revoked_at", sa.Float, nullable=False),
        sa.Column("reason", sa.String(256), nullable=False),
    )
    op.create_table(
        "evidence",
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(64), nullable=False, unique=True),
        sa.Column("task_id", sa.String(64), nullable=False),
        sa.Column("org_id", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("tool", sa.String(128)),
        sa.Column("door", sa.String(32)),
        sa.Column("status", sa.String(32)),
        sa.Column("error_code", sa.String(64)),
        sa.Column("charged", sa.Integer, nullable=False),
        sa.Column("side_effect", sa.Integer, nullable=False),
        sa.Column("record", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_evidence_owner", "evidence", ["org_id", "task_id", "seq"])
    op.create_table(
        "artifacts",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("task_id", sa.String(64), nullable=False),
        sa.Column("org_id", sa.String(128), nullable=False),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("media_type", sa.String(128), nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("path", sa.String(512), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_artifacts_owner", "artifacts", ["org_id", "task_id"])
    op.create_table(
        "idempotency",
        sa.Column("task_id", sa.String(64), primary_key=True),
        sa.Column("tool", sa.String(128), primary_key=True),
        sa.Column("key", sa.String(256), primary_key=True),
        sa.Column("call_id", sa.String(64), nullable=False),
        sa.Column("result", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    for table in ("idempotency", "artifacts", "evidence", "revocations", "tasks"):
        op.drop_table(table)
