"""The input an idempotency key was first used with; approvals and what they granted.

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
    # A data dir of a build between the releases may have some of these already (they were
    # added at start then): add only what is missing.
    existing = sa.inspect(op.get_bind())
    tables = set(existing.get_table_names())
    columns = {c["name"] for c in existing.get_columns("idempotency")}
    if "input_sha256" not in columns:
        with op.batch_alter_table("idempotency") as batch:
            batch.add_column(sa.Column("input_sha256", sa.String(64), nullable=True))
    if "approvals" not in tables:
        op.create_table(
            "approvals",
            sa.Column("id", sa.String(64), primary_key=True),
            sa.Column("task_id", sa.String(64), nullable=False),
            sa.Column("org_id", sa.String(128), nullable=False),
            sa.Column("call_id", sa.String(64), nullable=False),
            sa.Column("tool", sa.String(128), nullable=False),
            sa.Column("status", sa.String(16), nullable=False),
            sa.Column("request", sa.Text, nullable=False),
            sa.Column("nonce_sha256", sa.String(64), nullable=False),
            sa.Column("decision", sa.Text),
            sa.Column("created_at", sa.Float, nullable=False),
            sa.Column("expires_at", sa.Float, nullable=False),
            sa.Column("decided_at", sa.Float),
        )
        op.create_index("ix_approvals_task", "approvals", ["task_id", "created_at"])
    if "task_grants" not in tables:
        op.create_table(
            "task_grants",
            sa.Column("task_id", sa.String(64), primary_key=True),
            sa.Column("tool", sa.String(128), primary_key=True),
            sa.Column("grant", sa.Text, nullable=False),
            sa.Column("created_at", sa.Float, nullable=False),
        )


def downgrade() -> None:
    op.drop_table("task_grants")
    op.drop_table("approvals")
    with op.batch_alter_table("idempotency") as batch:
        batch.drop_column("input_sha256")
