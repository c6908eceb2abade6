"""The tables as the code reads and writes them. Portable types only, so the same schema runs
on SQLite and PostgreSQL. A change here comes with a migration in `migrations/versions/`
(tests/store/test_migrations.py checks that the two agree)."""

from __future__ import annotations

from sqlalchemy import (
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()

tasks = Table(
    "tasks",
    metadata,
    Column("task_id", String(64), primary_key=True),
    Column("org_id", String(128), nullable=False),
    Column("actor_id", String(128), nullable=False),
    Column("identity", Text, nullable=False),  # TaskIdentity as JSON
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Index("ix_tasks_org", "org_id"),
)

# One row per ended task: ending revokes every token of the task at once, so the
# revocation is by task, and it is durable (verification reads it after a restart).
revocations = Table(
    "revocations",
    metadata,
    Column("task_id", String(64), primary_key=True),
    Column("revoked_at", Float, nullable=False),
    Column("reason", String(256), nullable=False),
)

evidence = Table(
    "evidence",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("id", String(64), nullable=False, unique=True),
    Column("task_id", String(64), nullable=False),
    Column("org_id", String(128), nullable=False),
    Column("kind", String(32), nullable=False),  # call | event
    Column("tool", String(128)),
    Column("door", String(32)),
    Column("status", String(32)),
    Column("error_code", String(64)),
    # What the record spent of the task's budget, summed to restore it after a restart.
    Column("charged", Integer, nullable=False, default=0),
    Column("side_effect", Integer, nullable=False, default=0),
    Column("record", Text, nullable=False),  # redacted JSON
    Column("created_at", Float, nullable=False),
    Index("ix_evidence_owner", "org_id", "task_id", "seq"),
)

artifacts = Table(
    "artifacts",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("task_id", String(64), nullable=False),
    Column("org_id", String(128), nullable=False),
    Column("name", String(256), nullable=False),
    Column("media_type", String(128), nullable=False),
    Column("size", Integer, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("path", String(512), nullable=False),  # relative to the data dir
    Column("created_at", Float, nullable=False),
    Index("ix_artifacts_owner", "org_id", "task_id"),
)

idempotency = Table(
    "idempotency",
    metadata,
    Column("task_id", String(64), primary_key=True),
    Column("tool", String(128), primary_key=True),
    Column("key", String(256), primary_key=True),
    Column("call_id", String(64), nullable=False),
    Column("result", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    # sha256 of the validated input the key was first used with; null in rows kept
    # before it was recorded (those replay whatever the input).
    Column("input_sha256", String(64), nullable=True),
)

# Approval requests, one row each, under the task's owner: the outcome is decided by one
# conditional update (status pending -> decided), so a second answer finds nothing to change.
approvals = Table(
    "approvals",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("task_id", String(64), nullable=False),
    Column("org_id", String(128), nullable=False),
    Column("call_id", String(64), nullable=False),
    Column("tool", String(128), nullable=False),
    Column("status", String(16), nullable=False),
    Column("request", Text, nullable=False),  # the request as JSON (summary, digest, door...)
    Column("nonce_sha256", String(64), nullable=False),
    Column("decision", Text),  # who, how, which channel, as JSON
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("decided_at", Float),
    Index("ix_approvals_task", "task_id", "created_at"),
)

# What a person approved for the rest of a task (`scope: task`): later calls pass.
task_grants = Table(
    "task_grants",
    metadata,
    Column("task_id", String(64), primary_key=True),
    Column("tool", String(128), primary_key=True),
    Column("grant", Text, nullable=False),
    Column("created_at", Float, nullable=False),
)
