"""The one place where each part's config is built from `Settings`.

A part's constructor takes its frozen config (beside the part, e.g. gateway/store/config.py)
rather than the whole `Settings`, so a part can be built and tested without the
environment; the environment variable names stay those of `Settings`.
"""

from __future__ import annotations

from gateway.browser.config import BrowserPoolConfig, BrowserProcessesConfig
from gateway.mcp_door.config import McpDoorConfig
from gateway.settings import Settings
from gateway.store.config import StoreConfig


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
        user=settings.browser_user,
        executable=settings.browser_executable,
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
