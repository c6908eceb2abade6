"""The example dashboard's tables (SQLAlchemy Core). Every row carries its `org_id`."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()

agents = Table(
    "agents",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("org_id", String(64), nullable=False, index=True),
    Column("name", String(120), nullable=False),
    Column("current_version_id", String(40)),
    Column("created_by", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
)

agent_versions = Table(
    "agent_versions",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("agent_id", String(40), ForeignKey("agents.id"), nullable=False),
    Column("org_id", String(64), nullable=False),
    Column("number", Integer, nullable=False),
    Column("name", String(120), nullable=False),
    Column("instructions", Text, nullable=False),
    Column("model", String(64), nullable=False),
    Column("tools", JSON, nullable=False),
    Column("created_by", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_versions_agent", "agent_id", "number", unique=True),
)

# At most one unsaved draft per agent; saving turns it into the next version.
agent_drafts = Table(
    "agent_drafts",
    metadata,
    Column("agent_id", String(40), ForeignKey("agents.id"), primary_key=True),
    Column("org_id", String(64), nullable=False),
    Column("name", String(120), nullable=False),
    Column("instructions", Text, nullable=False),
    Column("model", String(64), nullable=False),
    Column("tools", JSON, nullable=False),
    Column("base_version_id", String(40)),
    Column("updated_by", String(64), nullable=False),
    Column("updated_at", Float, nullable=False),
)

suites = Table(
    "suites",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("org_id", String(64), nullable=False, index=True),
    Column("name", String(120), nullable=False),
    Column("description", Text, nullable=False),
)

scenarios = Table(
    "scenarios",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("suite_id", String(40), ForeignKey("suites.id"), nullable=False, index=True),
    Column("org_id", String(64), nullable=False),
    Column("position", Integer, nullable=False),
    Column("name", String(120), nullable=False),
    Column("prompt", Text, nullable=False),
    Column("required_terms", JSON, nullable=False),
    Column("required_tool", String(64)),
    Column("provider", String(64)),
)

runs = Table(
    "runs",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("org_id", String(64), nullable=False, index=True),
    Column("agent_id", String(40), nullable=False),
    Column("version_id", String(40), nullable=False),
    Column("suite_id", String(40), nullable=False),
    # queued -> running -> completed | failed
    Column("state", String(16), nullable=False),
    Column("budget", JSON, nullable=False),
    Column("created_by", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("started_at", Float),
    Column("finished_at", Float),
    Column("error", Text),
)

run_results = Table(
    "run_results",
    metadata,
    Column("run_id", String(40), ForeignKey("runs.id"), primary_key=True),
    Column("scenario_id", String(40), primary_key=True),
    Column("org_id", String(64), nullable=False),
    Column("position", Integer, nullable=False),
    Column("name", String(120), nullable=False),
    # pending -> running -> passed | failed | provider_error
    Column("state", String(16), nullable=False),
    Column("reason", String(32)),
    Column("detail", Text),
    Column("tokens", Integer),
)

reports = Table(
    "reports",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("org_id", String(64), nullable=False),
    Column("run_id", String(40), ForeignKey("runs.id"), nullable=False, unique=True),
    Column("created_at", Float, nullable=False),
    Column("summary", JSON, nullable=False),
)
