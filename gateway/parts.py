"""Each part's config, and the one place where it is built from `Settings`.

A part's constructor takes its frozen config rather than the whole `Settings`, so a part
can be built and tested without the environment; the environment variable names stay
those of `Settings`. The configs of the adapters (the browser pool, its processes and its
tools, the MCP door, the sandbox providers, the workspaces) are here, in the running
gateway's layer, so that building them imports no adapter code; the core parts' are below,
beside each part (`gateway/core/store/config.py`, `gateway/core/tasks/config.py`,
`gateway/core/approvals/config.py`, `EvidenceConfig` in `gateway/core/evidence.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gateway.core.approvals.config import ApprovalsConfig
from gateway.core.evidence import EvidenceConfig
from gateway.core.sandbox_spec import (
    DEFAULT_BUDGETS,
    DEFAULT_MAX_LIMITS,
    Budgets,
    IncusBackend,
    Limits,
    Repository,
)
from gateway.core.store.config import StoreConfig
from gateway.core.tasks.config import TasksConfig
from gateway.settings import Settings


@dataclass(frozen=True, slots=True)
class BrowserPoolConfig:
    """How many task contexts, how long they live and how each process admits calls."""

    max_contexts: int = 32
    # Never-used contexts kept ready (at most `max_contexts`).
    warm_contexts: int = 2
    idle_s: float = 300.0
    launch_at_start: bool = True
    snapshot_max_chars: int = 24000
    trace: bool = False
    screenshots: bool = False
    actions_per_process: int = 4
    # 0: snapshots share the actions' lane.
    reads_per_process: int = 8
    # Calls queued per slot of a lane before more are turned away; None: unbounded.
    waiting_per_slot: int | None = None


@dataclass(frozen=True, slots=True)
class BrowserProcessesConfig:
    """Where the pool's browsers come from: Chromium launched here, or remote servers."""

    # Playwright's driver writes here (the ffmpeg it finds for videos).
    data_dir: Path
    processes: int = 1
    # With it, the local slots connect to this server rather than launch a Chromium.
    ws_endpoint: str | None = None
    ws_endpoints: tuple[str, ...] = ()
    network_jail: bool = True
    # The jailed browsers' guard proxies in a process of their own (else on the gateway's
    # event loop).
    guard_process: bool = True
    user: str | None = None
    executable: str | None = None


@dataclass(frozen=True, slots=True)
class BrowserToolsConfig:
    """What the browser tools bound: the snapshot they answer with, and the files that
    cross between a task's workspace and its pages."""

    snapshot_max_chars: int = 24000
    upload_max_bytes: int = 16 * 1024 * 1024
    download_max_bytes: int = 32 * 1024 * 1024


# Larger images are not inlined as MCP image blocks.
MAX_IMAGE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class McpDoorConfig:
    """The door's limits, and whether it answers as a node of a cluster."""

    # On a cluster's node: no sessions, no parked calls, no call tasks.
    clustered: bool = False
    image_blocks: bool = True
    max_image_bytes: int = MAX_IMAGE_BYTES
    max_body_bytes: int = 1024 * 1024
    session_idle_s: float = 1800.0
    max_sessions_per_task: int = 16


@dataclass(frozen=True, slots=True)
class SandboxesConfig:
    """What every sandbox provider reads: where its sandboxes are, what they may run, and
    the most each may take."""

    # Checkouts, data folders and sockets are below it.
    root: Path
    repositories: Mapping[str, Repository] = field(default_factory=dict)
    max_limits: Limits = DEFAULT_MAX_LIMITS
    # Live sandboxes of one provider at once; past it a create is refused.
    max_live: int = 32
    # The DNS suffix of sandbox origins (`http://sbx-<id>.<domain>`).
    domain: str = "sandbox.internal"
    keep_data_max_bytes: int = 64 * 1024 * 1024
    # What one sandbox's files may take: its checkout, its data, its /tmp.
    budgets: Budgets = DEFAULT_BUDGETS


@dataclass(frozen=True, slots=True)
class LocalConfig:
    """The `local` provider's: the sandboxes' bounds, their users and their cgroup."""

    sandboxes: SandboxesConfig
    # Sandboxes run as uid `uid_base + slot`, one slot per live sandbox.
    uid_base: int = 1_900_000_000
    # A delegated cgroup v2 folder; unset (or not usable): resource limits alone.
    cgroup: str | None = None


@dataclass(frozen=True, slots=True)
class IncusConfig:
    """The `incus` provider's: the sandboxes' bounds and where its containers are made."""

    sandboxes: SandboxesConfig
    backend: IncusBackend


@dataclass(frozen=True, slots=True)
class WorkspaceConfig:
    """Where the tasks' workspaces are and what each may hold."""

    # Each task's workspace is `<data_dir>/workspaces/o_<org>/<task>`.
    data_dir: Path
    # Bytes of file contents, and entries (files and directories alike).
    max_bytes: int = 256 * 1024 * 1024
    max_files: int = 10_000


def store_config(settings: Settings) -> StoreConfig:
    """The store's database, data dir, SQLite durability and artifact limit."""
    return StoreConfig(
        url=settings.resolved_database_url(),
        data_dir=settings.data_dir,
        synchronous=settings.db_synchronous,
        max_artifacts_per_task=settings.max_artifacts_per_task,
    )


def browser_pool_config(settings: Settings) -> BrowserPoolConfig:
    """The task browser pool's bound, warm stock, idle limit and per-process admission."""
    return BrowserPoolConfig(
        max_contexts=settings.max_contexts,
        warm_contexts=settings.browser_warm_contexts,
        idle_s=settings.browser_idle_s,
        launch_at_start=settings.browser_launch_at_start,
        snapshot_max_chars=settings.browser_snapshot_max_chars,
        trace=settings.browser_trace,
        screenshots=settings.browser_screenshots,
        actions_per_process=settings.browser_actions_per_process,
        reads_per_process=settings.browser_reads_per_process,
        waiting_per_slot=settings.browser_waiting_per_slot,
    )


def browser_processes_config(settings: Settings) -> BrowserProcessesConfig:
    """The pool's local Chromium processes, remote servers and network jail."""
    return BrowserProcessesConfig(
        data_dir=settings.data_dir,
        processes=settings.browser_processes,
        ws_endpoint=settings.browser_ws_endpoint,
        ws_endpoints=tuple(settings.browser_ws_endpoints),
        network_jail=settings.browser_network_jail,
        guard_process=settings.browser_guard_process,
        user=settings.browser_user,
        executable=settings.browser_executable,
    )


def browser_tools_config(settings: Settings) -> BrowserToolsConfig:
    """The browser tools' snapshot bound and their upload and download bounds."""
    return BrowserToolsConfig(
        snapshot_max_chars=settings.browser_snapshot_max_chars,
        upload_max_bytes=settings.browser_upload_max_bytes,
        download_max_bytes=settings.browser_download_max_bytes,
    )


def mcp_door_config(settings: Settings) -> McpDoorConfig:
    """The MCP door's limits and whether it runs on a cluster's node."""
    return McpDoorConfig(
        clustered=settings.clustered,
        image_blocks=settings.mcp_image_blocks,
        max_body_bytes=settings.max_body_bytes,
        session_idle_s=settings.mcp_session_idle_s,
        max_sessions_per_task=settings.mcp_max_sessions_per_task,
    )


def sandboxes_config(settings: Settings) -> SandboxesConfig:
    """What every sandbox provider reads: the sandbox dir, repositories, limits, budgets."""
    return SandboxesConfig(
        root=settings.sandbox_root,
        repositories=dict(settings.sandbox_repositories),
        max_limits=settings.sandbox_max_limits,
        max_live=settings.sandbox_max_live,
        domain=settings.sandbox_domain,
        keep_data_max_bytes=settings.sandbox_keep_data_max_bytes,
        budgets=settings.sandbox_budgets,
    )


def local_config(settings: Settings) -> LocalConfig:
    """The `local` provider's bounds, the first of its users' uids and its cgroup."""
    return LocalConfig(
        sandboxes=sandboxes_config(settings),
        uid_base=settings.sandbox_uid_base,
        cgroup=settings.sandbox_cgroup,
    )


def incus_config(settings: Settings) -> IncusConfig | None:
    """The `incus` provider's bounds and backend; None when no backend is set (the gateway
    then has no `incus` provider)."""
    if settings.sandbox_incus is None:
        return None
    return IncusConfig(sandboxes=sandboxes_config(settings), backend=settings.sandbox_incus)


def tasks_config(settings: Settings) -> TasksConfig:
    """The task service's token and task lifetimes and its live tasks per organization."""
    return TasksConfig(
        tab_token_ttl_s=settings.tab_token_ttl_s,
        agent_token_ttl_s=settings.agent_token_ttl_s,
        bridge_token_ttl_s=settings.bridge_token_ttl_s,
        max_task_ttl_s=settings.max_task_ttl_s,
        max_live_per_org=settings.max_live_tasks_per_org,
    )


def evidence_config(settings: Settings) -> EvidenceConfig:
    """The event log's quota of events per task."""
    return EvidenceConfig(max_events_per_task=settings.evidence_max_events_per_task)


def approvals_config(settings: Settings) -> ApprovalsConfig:
    """The approvals desk's limit of requests waiting per task."""
    return ApprovalsConfig(max_pending_per_task=settings.max_pending_approvals_per_task)


def workspace_config(settings: Settings) -> WorkspaceConfig:
    """Where the workspaces are and each one's quota of bytes and entries."""
    return WorkspaceConfig(
        data_dir=settings.data_dir,
        max_bytes=settings.workspace_max_bytes,
        max_files=settings.workspace_max_files,
    )
