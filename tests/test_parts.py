"""Each part's config is built from the environment variables `Settings` has always read."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.core.approvals.config import ApprovalsConfig
from gateway.core.errors import StorageError
from gateway.core.evidence import EvidenceConfig
from gateway.core.sandbox_spec import Budgets
from gateway.core.store.config import StoreConfig
from gateway.core.store.database import Store, sqlite_url
from gateway.core.tasks.config import TasksConfig
from gateway.core.tokens import Purpose
from gateway.parts import (
    BrowserPoolConfig,
    BrowserProcessesConfig,
    BrowserToolsConfig,
    LocalConfig,
    McpDoorConfig,
    SandboxesConfig,
    WorkspaceConfig,
    approvals_config,
    browser_pool_config,
    browser_processes_config,
    browser_tools_config,
    evidence_config,
    incus_config,
    local_config,
    mcp_door_config,
    store_config,
    tasks_config,
    workspace_config,
)
from gateway.runtime import Gateway
from gateway.sandbox.incus import IncusProvider
from gateway.sandbox.local import LocalProvider
from gateway.settings import Settings
from gateway.workspace.quota import Limits
from gateway.workspace.tools import Workspaces


@pytest.mark.parametrize(
    ("env", "value", "field", "expected"),
    [
        ("GATEWAY_DATABASE_URL", "sqlite+aiosqlite:///x.db", "url", "sqlite+aiosqlite:///x.db"),
        ("GATEWAY_DATA_DIR", "/srv/gw", "data_dir", Path("/srv/gw")),
        ("GATEWAY_DB_SYNCHRONOUS", "FULL", "synchronous", "FULL"),
        ("GATEWAY_MAX_ARTIFACTS_PER_TASK", "7", "max_artifacts_per_task", 7),
    ],
)
def test_store_env_names(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, field: str, expected: object
) -> None:
    monkeypatch.setenv(env, value)
    assert getattr(store_config(Settings()), field) == expected


def test_store_config_is_frozen(tmp_path: Path) -> None:
    config = StoreConfig("sqlite+aiosqlite:///x.db", tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.url = "other"  # type: ignore[misc]


def test_bad_value_is_refused_by_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_DB_SYNCHRONOUS", "SOMETIMES")
    with pytest.raises(ValidationError):
        store_config(Settings())


async def test_store_as_context_manager(tmp_path: Path) -> None:
    async with Store(StoreConfig(sqlite_url(tmp_path), tmp_path)) as store:
        assert store.engine is not None
    with pytest.raises(StorageError):
        _ = store.engine


@pytest.mark.parametrize(
    ("env", "value", "field", "expected"),
    [
        ("GATEWAY_MAX_CONTEXTS", "5", "max_contexts", 5),
        ("GATEWAY_BROWSER_WARM_CONTEXTS", "3", "warm_contexts", 3),
        ("GATEWAY_BROWSER_IDLE_S", "12.5", "idle_s", 12.5),
        ("GATEWAY_BROWSER_LAUNCH_AT_START", "false", "launch_at_start", False),
        ("GATEWAY_BROWSER_SNAPSHOT_MAX_CHARS", "5000", "snapshot_max_chars", 5000),
        ("GATEWAY_BROWSER_TRACE", "true", "trace", True),
        ("GATEWAY_BROWSER_SCREENSHOTS", "true", "screenshots", True),
        ("GATEWAY_BROWSER_ACTIONS_PER_PROCESS", "2", "actions_per_process", 2),
        ("GATEWAY_BROWSER_READS_PER_PROCESS", "0", "reads_per_process", 0),
        ("GATEWAY_BROWSER_WAITING_PER_SLOT", "6", "waiting_per_slot", 6),
    ],
)
def test_browser_pool_env_names(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, field: str, expected: object
) -> None:
    monkeypatch.setenv(env, value)
    assert getattr(browser_pool_config(Settings()), field) == expected


@pytest.mark.parametrize(
    ("env", "value", "field", "expected"),
    [
        ("GATEWAY_DATA_DIR", "/srv/gw", "data_dir", Path("/srv/gw")),
        ("GATEWAY_BROWSER_PROCESSES", "3", "processes", 3),
        ("GATEWAY_BROWSER_WS_ENDPOINT", "ws://b:1/x", "ws_endpoint", "ws://b:1/x"),
        (
            "GATEWAY_BROWSER_WS_ENDPOINTS",
            "ws://a:1/x,ws://b:2/y",
            "ws_endpoints",
            ("ws://a:1/x", "ws://b:2/y"),
        ),
        ("GATEWAY_BROWSER_NETWORK_JAIL", "false", "network_jail", False),
        ("GATEWAY_BROWSER_GUARD_PROCESS", "false", "guard_process", False),
        ("GATEWAY_BROWSER_USER", "chromium", "user", "chromium"),
        ("GATEWAY_BROWSER_EXECUTABLE", "/opt/chrome", "executable", "/opt/chrome"),
    ],
)
def test_browser_processes_env_names(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, field: str, expected: object
) -> None:
    monkeypatch.setenv(env, value)
    assert getattr(browser_processes_config(Settings()), field) == expected


@pytest.mark.parametrize(
    ("env", "value", "field", "expected"),
    [
        ("GATEWAY_BROWSER_SNAPSHOT_MAX_CHARS", "5000", "snapshot_max_chars", 5000),
        ("GATEWAY_BROWSER_UPLOAD_MAX_BYTES", "4096", "upload_max_bytes", 4096),
        ("GATEWAY_BROWSER_DOWNLOAD_MAX_BYTES", "16", "download_max_bytes", 16),
    ],
)
def test_browser_tools_env_names(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, field: str, expected: object
) -> None:
    monkeypatch.setenv(env, value)
    assert getattr(browser_tools_config(Settings()), field) == expected


@pytest.mark.parametrize(
    ("env", "value", "field", "expected"),
    [
        ("GATEWAY_MCP_IMAGE_BLOCKS", "false", "image_blocks", False),
        ("GATEWAY_MAX_BODY_BYTES", "4096", "max_body_bytes", 4096),
        ("GATEWAY_MCP_SESSION_IDLE_S", "60", "session_idle_s", 60.0),
        ("GATEWAY_MCP_MAX_SESSIONS_PER_TASK", "4", "max_sessions_per_task", 4),
    ],
)
def test_mcp_door_env_names(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, field: str, expected: object
) -> None:
    monkeypatch.setenv(env, value)
    assert getattr(mcp_door_config(Settings()), field) == expected


def test_mcp_door_is_clustered_with_a_node_id_and_nats(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not mcp_door_config(Settings()).clustered
    monkeypatch.setenv("GATEWAY_NODE_ID", "n1")
    monkeypatch.setenv("GATEWAY_NATS_URL", "nats://127.0.0.1:4222")
    assert mcp_door_config(Settings()).clustered


@pytest.mark.parametrize(
    ("env", "value", "field", "expected"),
    [
        ("GATEWAY_TAB_TOKEN_TTL_S", "60", "tab_token_ttl_s", 60),
        ("GATEWAY_AGENT_TOKEN_TTL_S", "61", "agent_token_ttl_s", 61),
        ("GATEWAY_BRIDGE_TOKEN_TTL_S", "62", "bridge_token_ttl_s", 62),
        ("GATEWAY_MAX_TASK_TTL_S", "600", "max_task_ttl_s", 600),
        ("GATEWAY_MAX_LIVE_TASKS_PER_ORG", "3", "max_live_per_org", 3),
    ],
)
def test_tasks_env_names(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, field: str, expected: object
) -> None:
    monkeypatch.setenv(env, value)
    assert getattr(tasks_config(Settings()), field) == expected


def test_each_token_purpose_has_its_own_ttl() -> None:
    config = TasksConfig(tab_token_ttl_s=1, agent_token_ttl_s=2, bridge_token_ttl_s=3)
    ttls = {purpose: config.token_ttl_s(purpose) for purpose in Purpose}
    assert ttls == {Purpose.TAB: 1, Purpose.AGENT: 2, Purpose.BRIDGE: 3}


def test_core_settings_reach_the_gateways_parts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GATEWAY_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("GATEWAY_MAX_TASK_TTL_S", "600")
    monkeypatch.setenv("GATEWAY_EVIDENCE_MAX_EVENTS_PER_TASK", "50")
    monkeypatch.setenv("GATEWAY_MAX_PENDING_APPROVALS_PER_TASK", "4")
    monkeypatch.setenv("GATEWAY_WORKSPACE_MAX_FILES", "9")
    settings = Settings()
    gw = Gateway(settings)
    assert gw.tasks.config.max_task_ttl_s == 600
    assert gw.events.quota == 50
    assert gw.approvals.max_pending_per_task == 4
    workspaces = Workspaces(workspace_config(settings))
    assert workspaces.limits == Limits(max_bytes=256 * MIB, max_files=9)


def test_evidence_and_approvals_env_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_EVIDENCE_MAX_EVENTS_PER_TASK", "50")
    monkeypatch.setenv("GATEWAY_MAX_PENDING_APPROVALS_PER_TASK", "4")
    settings = Settings()
    assert evidence_config(settings).max_events_per_task == 50
    assert approvals_config(settings).max_pending_per_task == 4


@pytest.mark.parametrize(
    ("env", "value", "field", "expected"),
    [
        ("GATEWAY_DATA_DIR", "/srv/gw", "data_dir", Path("/srv/gw")),
        ("GATEWAY_WORKSPACE_MAX_BYTES", "4096", "max_bytes", 4096),
        ("GATEWAY_WORKSPACE_MAX_FILES", "9", "max_files", 9),
    ],
)
def test_workspace_env_names(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, field: str, expected: object
) -> None:
    monkeypatch.setenv(env, value)
    assert getattr(workspace_config(Settings()), field) == expected


@pytest.mark.parametrize(
    ("env", "value", "setting"),
    [
        ("GATEWAY_TAB_TOKEN_TTL_S", "3601", "tab_token_ttl_s"),
        ("GATEWAY_MAX_LIVE_TASKS_PER_ORG", "0", "max_live_tasks_per_org"),
        ("GATEWAY_EVIDENCE_MAX_EVENTS_PER_TASK", "9", "evidence_max_events_per_task"),
        ("GATEWAY_MAX_PENDING_APPROVALS_PER_TASK", "0", "max_pending_approvals_per_task"),
        ("GATEWAY_WORKSPACE_MAX_FILES", "0", "workspace_max_files"),
    ],
)
def test_a_bad_core_limit_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, setting: str
) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(ValidationError, match=setting):
        Settings()


def test_config_defaults_are_the_settings_defaults() -> None:
    settings = Settings()
    assert tasks_config(settings) == TasksConfig()
    assert evidence_config(settings) == EvidenceConfig()
    assert approvals_config(settings) == ApprovalsConfig()
    assert workspace_config(settings) == WorkspaceConfig(settings.data_dir)
    assert browser_pool_config(settings) == BrowserPoolConfig()
    assert browser_processes_config(settings) == BrowserProcessesConfig(settings.data_dir)
    assert browser_tools_config(settings) == BrowserToolsConfig()
    assert mcp_door_config(settings) == McpDoorConfig()
    assert local_config(settings) == LocalConfig(SandboxesConfig(settings.sandbox_root))


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (BrowserPoolConfig(), "max_contexts"),
        (BrowserProcessesConfig(Path("/srv/gw")), "processes"),
        (BrowserToolsConfig(), "upload_max_bytes"),
        (McpDoorConfig(), "max_body_bytes"),
        (LocalConfig(SandboxesConfig(Path("/srv/gw"))), "uid_base"),
        (TasksConfig(), "max_task_ttl_s"),
        (EvidenceConfig(), "max_events_per_task"),
        (ApprovalsConfig(), "max_pending_per_task"),
        (WorkspaceConfig(Path("/srv/gw")), "max_files"),
    ],
)
def test_part_configs_are_frozen(config: object, field: str) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(config, field, 1)


MIB = 1024 * 1024


def test_sandbox_settings_reach_the_local_provider(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GATEWAY_SANDBOX_DIR", str(tmp_path / "sandboxes"))
    monkeypatch.setenv("GATEWAY_SANDBOX_UID_BASE", "2000000000")
    monkeypatch.setenv("GATEWAY_SANDBOX_MAX_LIVE", "4")
    monkeypatch.setenv("GATEWAY_SANDBOX_KEEP_DATA_MAX_BYTES", "1024")
    # Only the keys given change; the others keep their defaults.
    monkeypatch.setenv("GATEWAY_SANDBOX_BUDGETS", '{"data_bytes": 1048576, "tmp_bytes": 2097152}')
    provider = LocalProvider(local_config(Settings()))
    assert provider.config.uid_base == 2_000_000_000
    assert provider.config.sandboxes.root == tmp_path / "sandboxes"
    assert provider.config.sandboxes.max_live == 4
    assert provider.config.sandboxes.keep_data_max_bytes == 1024
    assert provider.config.sandboxes.budgets == Budgets(data_bytes=MIB, tmp_bytes=2 * MIB)


def test_an_incus_provider_exists_only_with_a_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    assert incus_config(Settings()) is None
    monkeypatch.setenv("GATEWAY_SANDBOX_INCUS", '{"deployment": "staging", "warm": 0}')
    monkeypatch.setenv("GATEWAY_SANDBOX_DOMAIN", "apps.internal")
    settings = Settings()
    config = incus_config(settings)
    assert config is not None
    provider = IncusProvider(config)
    assert provider.backend.deployment == "staging"
    assert provider.socket_dir == Path("/run/gateway-incus/staging")
    # Both providers read the same sandbox settings, built once.
    assert config.sandboxes == local_config(settings).sandboxes
    assert config.sandboxes.domain == "apps.internal"


def test_a_bad_sandbox_setting_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_SANDBOX_BUDGETS", '{"data_bytes": 0}')
    with pytest.raises(ValidationError, match=r"sandbox_budgets\.data_bytes"):
        local_config(Settings())
    monkeypatch.setenv("GATEWAY_SANDBOX_BUDGETS", '{"disk_bytes": 1}')
    with pytest.raises(ValidationError, match="disk_bytes"):
        local_config(Settings())
    monkeypatch.delenv("GATEWAY_SANDBOX_BUDGETS")
    monkeypatch.setenv("GATEWAY_SANDBOX_UID_BASE", "0")
    with pytest.raises(ValidationError, match="sandbox_uid_base"):
        local_config(Settings())
