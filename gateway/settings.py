"""Settings from the environment (prefix `GATEWAY_`), as CONTRACT section 1 lists them.

Secrets that are not given are generated on first start and kept in the data dir with mode
0600; they are never printed (only where they are kept).
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from gateway.core.origins import OriginError, normalize_origin
from gateway.core.private_files import private_dir, write_private
from gateway.core.sandbox_spec import (
    DEFAULT_BUDGETS,
    DEFAULT_MAX_LIMITS,
    Budgets,
    IncusBackend,
    Limits,
    Repository,
)


def _split(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GATEWAY_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    public_url: str | None = None  # how sandboxes and pages reach the gateway, if not host:port
    data_dir: Path = Path("./var/gateway")
    database_url: str | None = None
    db_synchronous: str = Field(default="NORMAL", pattern="^(?i)(OFF|NORMAL|FULL|EXTRA)$")
    # Where artifact bytes go: the data dir (unset), or `s3://bucket/prefix`, with
    # `artifacts_endpoint_url` for an S3-compatible server; credentials and region come from
    # boto3's usual sources (AWS_* variables, its config files). Changing it moves no bytes.
    # A task keeps at most `max_artifacts_per_task` artifacts; past it a new one is refused,
    # none is dropped.
    artifacts_url: str | None = None
    artifacts_endpoint_url: str | None = None
    max_artifacts_per_task: int = Field(default=1000, ge=1)
    secret_keys: Annotated[list[str], NoDecode] = Field(default_factory=list)
    control_key: str | None = None
    dashboard_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    browser_executable: str | None = None
    browser_ws_endpoint: str | None = None
    max_contexts: int = Field(default=32, ge=1)
    # The task browser: Chromium processes in the pool, never-used contexts kept ready,
    # how long an idle task's context lives, what it keeps as artifacts.
    # 0 only with `browser_ws_endpoints`: every task browser on the remote servers.
    browser_processes: int = Field(default=1, ge=0, le=64)
    # Two never-used contexts, opened when the gateway starts (after its Chromium, jail and
    # all): the first tasks' start pays neither the context nor its renderer's start-up.
    browser_warm_contexts: int = Field(default=2, ge=0, le=64)
    browser_idle_s: float = Field(default=300.0, gt=0)
    browser_trace: bool = False
    browser_screenshots: bool = False
    # The task browser's Chromium runs in a network namespace of its own, where the only
    # destination is the guard (off only where namespaces are not available: UDP and
    # WebRTC then have a way around the guard). As root it runs as `browser_user`
    # (default: `gateway-browser`, else `nobody`) with its own sandbox on.
    browser_network_jail: bool = True
    # The guard proxies of jailed browsers run in a process of their own, so the bytes of
    # the task's pages do not go through the event loop that serves tool calls; off, they
    # run on it (one process fewer).
    browser_guard_process: bool = True
    # Launch Chromium when the gateway starts (else on the first browser call).
    browser_launch_at_start: bool = True
    browser_user: str | None = None
    browser_snapshot_max_chars: int = Field(default=24000, ge=1000, le=1_000_000)
    # What `browser.upload` may hand a page in one call, and what one download may weigh
    # to be kept as an artifact of the task (a heavier one is refused and recorded).
    browser_upload_max_bytes: int = Field(default=16 * 1024 * 1024, ge=1, le=1024**3)
    browser_download_max_bytes: int = Field(default=32 * 1024 * 1024, ge=1, le=1024**3)
    # Browser actions running at once per Chromium process; the others wait their turn, and
    # a call that could not get one before its deadline is `unavailable`/`overloaded` at
    # once (gateway/browser/admission.py). Four: a task's click runs beside other tasks'
    # navigates instead of behind them, while a renderer's load still gets a fair share of
    # a small machine's cores (measured in docs/performance.md, bench.peer).
    browser_actions_per_process: int = Field(default=4, ge=1, le=64)
    # Snapshots running at once per Chromium process, in a lane of their own: a snapshot
    # only reads the page's accessibility tree, so it never waits behind another task's
    # navigate for an action slot, however long that page takes to load (at 8 sessions on
    # a busy machine, snapshot p99 2.84x Playwright MCP's against 4.12x in one lane;
    # docs/performance.md). 0: snapshots take action slots like every other call.
    browser_reads_per_process: int = Field(default=8, ge=0, le=64)
    # Calls that may wait per action slot before more are turned away. None (the default):
    # a call waits whenever the work ahead of it is predicted to end in time for its
    # deadline, so a burst of tasks acting at the same moment is served instead of told to
    # retry; a number also bounds the queue by count (a shorter admitted tail under steady
    # overload, more calls turned away).
    browser_waiting_per_slot: int | None = Field(default=None, ge=0, le=256)
    tab_token_ttl_s: int = Field(default=900, ge=1, le=3600)
    agent_token_ttl_s: int = Field(default=900, ge=1, le=3600)
    bridge_token_ttl_s: int = Field(default=900, ge=1, le=3600)
    max_task_ttl_s: int = Field(default=3600, ge=1, le=86400)
    # Events (not calls) a task may leave in evidence; past it they are counted, not kept.
    evidence_max_events_per_task: int = Field(default=10_000, ge=10)
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    # Quotas. A task's workspace holds at most this many bytes (of file contents) and
    # entries (files and directories alike: a directory costs an inode and a block too); an
    # organization has at most this many live tasks at once.
    workspace_max_bytes: int = Field(default=256 * 1024 * 1024, ge=1)
    workspace_max_files: int = Field(default=10_000, ge=1)
    max_live_tasks_per_org: int = Field(default=100, ge=1)
    # Approval requests one task may have waiting for a person at once.
    max_pending_approvals_per_task: int = Field(default=16, ge=1, le=1000)
    # Sandboxes provisioned per task (docs/sandbox.md). Repositories a task may name, as
    # JSON {name: {path, command, health_path, env, read_only, ready_timeout_s}}; the
    # limits a task may ask for at most (and gets when it names none); where checkouts and
    # data live (default: `sandboxes` in the data dir); the first of the users sandboxes
    # run as (one per live sandbox, `sandbox_max_live` of them); the DNS suffix of their
    # origins, one no name server answers; a delegated cgroup v2 folder, if any.
    sandbox_repositories: dict[str, Repository] = Field(default_factory=dict)
    sandbox_max_limits: Limits = DEFAULT_MAX_LIMITS
    sandbox_dir: Path | None = None
    sandbox_uid_base: int = Field(default=1_900_000_000, ge=10_000, le=4_000_000_000)
    sandbox_max_live: int = Field(default=32, ge=1, le=65_536)
    # Of those, the most one organization may hold at once (None: no share of its own).
    sandbox_max_live_per_org: int | None = Field(default=None, ge=1, le=65_536)
    sandbox_domain: str = Field(
        default="sandbox.internal", pattern=r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*internal$"
    )
    sandbox_cgroup: str | None = None
    sandbox_keep_data_max_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    # What one sandbox's files may take: its checkout, its data, its /tmp (JSON).
    sandbox_budgets: Budgets = DEFAULT_BUDGETS
    # The `incus` provider's backend (JSON, `IncusBackend`); unset: no `incus` provider.
    sandbox_incus: IncusBackend | None = None
    # `gateway serve` serves the example dashboard beside the gateway (`--example`): off
    # unless asked, as its sign-in asks no password and it holds the control key.
    example: bool = False
    example_port: int = Field(default=8001, ge=0, le=65535)
    # `gateway serve` gives each assistant task of the example its own sandbox of the app
    # at the repository's current commit (false: the shared instance beside the dashboard).
    example_sandboxes: bool = True
    # Host values every route answers (`name`, `name:port`, `name:*`, or `*`). Empty: the
    # gateway's own host (public_url, else host:port) and loopback. `mcp_allowed_hosts` is
    # this setting's first name, still read; the MCP door also checks browser Origins.
    allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    mcp_allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    mcp_allowed_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # MCP sessions a task may hold (at the cap a new one closes the least recently used idle
    # one), and how long an unused session lives.
    mcp_max_sessions_per_task: int = Field(default=16, ge=1, le=1024)
    mcp_session_idle_s: float = Field(default=1800.0, gt=0)
    # A screenshot's result carries the picture as an MCP image block (off: the ref only).
    mcp_image_blocks: bool = True
    # A cluster (docs/deploy.md): a node's name, the NATS server its nodes talk over, and
    # how often it beats (three missed beats and another node frees its tasks). All unset:
    # one process, as without a cluster. A cluster needs PostgreSQL and shared keys.
    node_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")
    nats_url: str | None = None
    # The NATS user this node connects as (default: its node id) and its password: a user
    # per node, each allowed only its own subjects (docs/deploy.md). Without a password
    # the node connects with none, and warns that any local process then reads its bus.
    nats_user: str | None = None
    nats_password: str | None = None
    cluster_beat_s: float = Field(default=1.0, gt=0, le=60)
    # Remote Playwright browser servers (`playwright run-server`) a node may open task
    # contexts on, besides its own Chromium; a new context goes to the least loaded.
    # One pool slot each, besides the `browser_processes` local ones: a server that dies
    # costs only its own tasks' contexts and is reconnected on demand. Each must run its
    # Chromium in this gateway's network jail, on this machine (docs/task-browser.md),
    # or its probe refuses it and its slot never serves.
    browser_ws_endpoints: Annotated[list[str], NoDecode] = Field(default_factory=list)

    @field_validator("secret_keys", mode="before")
    @classmethod
    def _keys(cls, value: object) -> object:
        return _split(value)

    @field_validator(
        "allowed_hosts",
        "mcp_allowed_hosts",
        "mcp_allowed_origins",
        "browser_ws_endpoints",
        mode="before",
    )
    @classmethod
    def _mcp_lists(cls, value: object) -> object:
        return _split(value)

    @field_validator("artifacts_url", "artifacts_endpoint_url", mode="before")
    @classmethod
    def _artifacts(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, str) and not value.strip():
            return None  # an empty variable means "not set": the data dir
        if info.field_name == "artifacts_url" and isinstance(value, str):
            # The one shape gateway.core.store.objects can use: a bucket, and a prefix or none.
            parts = urlsplit(value)
            if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
                raise ValueError("artifacts_url must be s3://bucket or s3://bucket/prefix")
        return value

    @field_validator("dashboard_origins", mode="before")
    @classmethod
    def _origins(cls, value: object) -> object:
        values = _split(value)
        if isinstance(values, list):
            try:
                return [normalize_origin(str(v)) for v in values]
            except OriginError as exc:
                raise ValueError(str(exc)) from exc
        return values

    @property
    def sandbox_root(self) -> Path:
        return self.sandbox_dir if self.sandbox_dir is not None else self.data_dir / "sandboxes"

    @property
    def base_url(self) -> str:
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")

    @model_validator(mode="after")
    def _some_browser(self) -> Settings:
        if self.browser_processes == 0 and not self.browser_ws_endpoints:
            raise ValueError("browser_processes may be 0 only with browser_ws_endpoints set")
        return self

    @property
    def clustered(self) -> bool:
        """Whether this process is a node of a cluster (`node_id` and `nats_url` both set)."""
        return self.node_id is not None and self.nats_url is not None

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{self.data_dir.resolve() / 'gateway.db'}"

    def ensure_secrets(self) -> list[str]:
        """Fill in generated keys from (or into) the data dir; returns notes to print."""
        notes: list[str] = []
        private_dir(self.data_dir)
        if not self.secret_keys:
            self.secret_keys = [_load_or_create(self.data_dir / "secret.key")]
        if not self.control_key:
            path = self.data_dir / "control.key"
            self.control_key = _load_or_create(path)
            notes.append(f"control-plane key kept in {path.resolve()} (mode 0600)")
        return notes


def _load_or_create(path: Path) -> str:
    if path.exists():
        value = path.read_text().strip()
        if value:
            return value
    value = secrets.token_urlsafe(32)
    write_private(path, (value + "\n").encode())
    return value
