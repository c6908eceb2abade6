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
    # The nodes of a cluster read the ends since their last look, by time.
    Index("ix_revocations_at", "revoked_at"),
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

# The nodes of a cluster (docs/deploy.md): each beats here, on the database's clock; a node
# three beats late is declared dead by another, which frees its tasks. `incarnation` tells
# a restarted node (or one that was paused past its death) from the one that was declared
# dead: its beats under the old incarnation change nothing.
nodes = Table(
    "nodes",
    metadata,
    Column("node_id", String(64), primary_key=True),
    Column("incarnation", String(64), nullable=False),
    Column("state", String(16), nullable=False),  # live | dead | left
    Column("started_at", Float, nullable=False),
    Column("beat_at", Float, nullable=False),
)

# Which node holds a task's live resources (its tab channel, its browser context), and the
# epoch, which grows at every change of owner. A side effect starts only under the current
# (node, epoch) and while `revoked` is 0, checked by one guarded UPDATE of this row; ending
# the task sets `revoked` on the same row, so the two never pass each other.
task_owners = Table(
    "task_owners",
    metadata,
    Column("task_id", String(64), primary_key=True),
    Column("node_id", String(64)),  # null: nobody holds it now
    Column("epoch", Integer, nullable=False),
    Column("revoked", Integer, nullable=False, default=0),
    # 1 once the owner opened the task's browser context: a node that takes the task over
    # from it tells the agent, once, that the context was lost.
    Column("browser", Integer, nullable=False, default=0),
    Column("changed_at", Float, nullable=False),
)

# A keyed side-effect call about to start, written (under the owner's fence) before it runs:
# if its node dies before the outcome is recorded, a retry with the key finds this row and
# no result, and is told `in_doubt` instead of running it again.
call_intents = Table(
    "call_intents",
    metadata,
    Column("task_id", String(64), primary_key=True),
    Column("tool", String(128), primary_key=True),
    Column("key", String(256), primary_key=True),
    Column("call_id", String(64), nullable=False),
    Column("node_id", String(64), nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("started_at", Float, nullable=False),
)
