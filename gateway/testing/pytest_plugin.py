"""The gateway's pytest plugin, on top of pytest-playwright (entry point `gateway`).

Fixtures:

- `gateway`: a gateway for the session (a free loopback port, its own data dir, stopped at
  the end), or the one `--gateway-url` and `--gateway-control-key` name (`gateway_endpoint`;
  `gateway_setup` and `gateway_settings` shape one started here);
- `gateway_task`: tasks; `gateway_task()` is the test's own task (its fields from the
  `gateway_task` marker), `gateway_task(actor=..., scopes=...)` another one; every task is
  ended after the test, even a failed one;
- `dashboard_page`: pytest-playwright's `page`, opened on the app page the `dashboard`
  marker names (else the plugin's host page) after `dashboard_sign_in`, and connected to
  the task's tab channel;
- `mcp_agent`, `bridge_client`: the task's agent on the MCP door and on the parent bridge;
- `evidence`: the task's records, with `assert_called` and `assert_not_called`.

pytest-playwright's options hold (`--browser chromium`, `--browser-channel`, `--headed`,
`--slowmo`, `--tracing`, `--video`, `--screenshot`); a gateway started here runs its task
browser on the same Chromium, and traces it when `--tracing` is on. When a test fails, the
evidence of its tasks (`gateway-evidence-<task>.json`) and their task-browser traces
(`task-browser-trace-<task>.zip`) are written to the test's pytest-playwright output folder.
Once the test is torn down, every zip there (pytest-playwright's own trace of the dashboard
page included, which records the arguments the page was handed) is rewritten without the
tokens of the test's tasks.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.browser import trace_scrub
from gateway.runtime import Gateway
from gateway.testing.agents import BridgeAgent, McpAgent
from gateway.testing.control import ControlPlane, GatewayTask
from gateway.testing.dashboard import DashboardPage
from gateway.testing.evidence import Evidence
from gateway.testing.loop_thread import LoopThread
from gateway.testing.served import ServedGateway, serve_host_page, start_gateway

_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()
# The test's tasks and its output folder, for taking their tokens out of its traces.
_TRACED = pytest.StashKey[tuple["TaskFactory", Path]]()
# A task browser closes after its task ends; its trace is recorded with that close.
TRACE_WAIT_S = 15.0


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gateway", "browser-session gateway")
    group.addoption(
        "--gateway-url",
        default=os.environ.get("GATEWAY_TEST_URL"),
        help="use the gateway running at this URL instead of starting one",
    )
    group.addoption(
        "--gateway-control-key",
        default=os.environ.get("GATEWAY_TEST_CONTROL_KEY"),
        help="the control key of the gateway named by --gateway-url",
    )
    group.addoption(
        "--gateway-host-port",
        type=int,
        default=0,
        help="port of the plugin's host page (a gateway elsewhere must allow its origin)",
    )
    group.addoption(
        "--gateway-dashboard-origin",
        action="append",
        default=[],
        help="an app origin allowed to open tab channels on the gateway started here",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "gateway_task(**fields): the fields of the test's own task (gateway_task())"
    )
    config.addinivalue_line(
        "markers", "dashboard(url, hook='gatewayConnect'): the app page dashboard_page opens"
    )
    # Registered last, so its launch arguments wrap pytest-playwright's.
    if config.pluginmanager.has_plugin("playwright"):
        config.pluginmanager.import_plugin("gateway.testing.launch")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


# pytest-playwright's sync API runs its event loop on the main thread for as long as its
# session lasts, and pytest-asyncio cannot run one there meanwhile. The tests that use it
# run after every other, so its session starts after the last async test and ends first.
_SYNC_PLAYWRIGHT = frozenset({"page", "context", "new_context", "browser", "dashboard_page"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: bool(_SYNC_PLAYWRIGHT & set(getattr(item, "fixturenames", ()))))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    try:
        yield
    finally:
        traced = item.stash.get(_TRACED, None)
        if traced is not None:
            _scrub_traces(*traced)


def _scrub_traces(factory: TaskFactory, folder: Path) -> None:
    """pytest-playwright's trace keeps what `page.evaluate` was given (the tab token the
    dashboard page connects with): no artifact of the test keeps a token of its tasks."""
    tokens = {token for task in factory.created for token in task.tokens.values() if token}
    if not tokens or not folder.is_dir():
        return
    for path in folder.rglob("*.zip"):
        data = path.read_bytes()
        scrubbed = trace_scrub.scrub(data, tokens)
        if scrubbed != data:
            path.write_bytes(scrubbed)


def _failed(item: pytest.Item) -> bool:
    reports = item.stash.get(_REPORTS, {})
    return any(r.failed for r in reports.values())


# -- the gateway ------------------------------------------------------------------------


@dataclass
class GatewayHandle:
    """The session's gateway: where it is, its control plane, and the host page."""

    base_url: str
    control: ControlPlane
    host_origin: str
    loop: LoopThread
    served: ServedGateway | None

    @property
    def in_process(self) -> Gateway | None:
        """The gateway object when this session started it; it lives on `loop`'s thread."""
        return self.served.gateway if self.served is not None else None


@pytest.fixture(scope="session")
def gateway_setup() -> Callable[[Gateway], None] | None:
    """Override to change the gateway started here before it serves (add tools)."""
    return None


@pytest.fixture(scope="session")
def gateway_settings() -> dict[str, Any]:
    """Override to change the settings of the gateway started here."""
    return {}


@dataclass(frozen=True)
class GatewayEndpoint:
    """A gateway running elsewhere: where it is and its control key."""

    url: str
    control_key: str


@pytest.fixture(scope="session")
def gateway_endpoint(pytestconfig: pytest.Config) -> GatewayEndpoint | None:
    """The gateway to use instead of starting one: `--gateway-url` with
    `--gateway-control-key`. Override it to start your own stack first."""
    url = pytestconfig.getoption("--gateway-url")
    if not url:
        return None
    key = pytestconfig.getoption("--gateway-control-key")
    if not key:
        raise pytest.UsageError("--gateway-url needs --gateway-control-key")
    return GatewayEndpoint(url, key)


@pytest.fixture(scope="session")
def gateway(
    pytestconfig: pytest.Config,
    tmp_path_factory: pytest.TempPathFactory,
    gateway_endpoint: GatewayEndpoint | None,
    gateway_setup: Callable[[Gateway], None] | None,
    gateway_settings: dict[str, Any],
    request: pytest.FixtureRequest,
) -> Iterator[GatewayHandle]:
    loop = LoopThread("gateway-pytest")
    try:
        if gateway_endpoint is not None:
            yield from _elsewhere(pytestconfig, loop, gateway_endpoint)
            return
        settings: dict[str, Any] = {
            "browser_trace": pytestconfig.getoption("--tracing", "off") != "off",
            **gateway_settings,
        }
        launch = (
            request.getfixturevalue("browser_type_launch_args")
            if pytestconfig.pluginmanager.has_plugin("playwright")
            else {}
        )
        if "browser_executable" not in settings and launch.get("executable_path"):
            settings["browser_executable"] = launch["executable_path"]
        served = start_gateway(
            loop,
            tmp_path_factory.mktemp("gateway"),
            dashboard_origins=pytestconfig.getoption("--gateway-dashboard-origin"),
            setup=gateway_setup,
            **settings,
        )
        control = ControlPlane(served.base_url, served.control_key)
        try:
            yield GatewayHandle(served.base_url, control, served.host_origin, loop, served)
        finally:
            control.close()
            served.stop()
    finally:
        loop.close()


def _elsewhere(
    config: pytest.Config, loop: LoopThread, endpoint: GatewayEndpoint
) -> Iterator[GatewayHandle]:
    host_origin, stop = serve_host_page(loop, config.getoption("--gateway-host-port"))
    control = ControlPlane(endpoint.url, endpoint.control_key)
    try:
        if not control.healthy():
            raise pytest.UsageError(f"no gateway answers at {endpoint.url}")
        yield GatewayHandle(control.base_url, control, host_origin, loop, None)
    finally:
        control.close()
        stop()


# -- tasks ------------------------------------------------------------------------------


class TaskFactory:
    """`gateway_task()`: the test's own task; `gateway_task(**fields)`: another one."""

    def __init__(self, control: ControlPlane, defaults: dict[str, Any]) -> None:
        self.control = control
        self.defaults = defaults
        self.created: list[GatewayTask] = []
        self._own: GatewayTask | None = None

    def __call__(self, **fields: Any) -> GatewayTask:
        if not fields:
            if self._own is None:
                self._own = self._create(self.defaults)
            return self._own
        return self._create({**self.defaults, **fields})

    def _create(self, fields: dict[str, Any]) -> GatewayTask:
        task = self.control.create_task(**fields)
        self.created.append(task)
        return task

    def end_all(self) -> list[str]:
        problems = []
        for task in self.created:
            try:
                self.control.end_task(task.task_id)
            except Exception as exc:
                problems.append(f"{task.task_id}: {exc}")
        return problems


@pytest.fixture
def gateway_task(gateway: GatewayHandle, request: pytest.FixtureRequest) -> Iterator[TaskFactory]:
    marker = request.node.get_closest_marker("gateway_task")
    factory = TaskFactory(gateway.control, dict(marker.kwargs) if marker else {})
    # Where pytest-playwright keeps this test's artifacts (asked for now: a fixture cannot
    # be first requested during teardown).
    folder = (
        Path(request.getfixturevalue("output_path"))
        if request.config.pluginmanager.has_plugin("playwright")
        else request.config.rootpath / "test-results" / _slug(request.node.nodeid)
    )
    request.node.stash[_TRACED] = (factory, folder)
    yield factory
    problems = factory.end_all()
    if _failed(request.node) and factory.created:
        _keep_failure_artifacts(gateway.control, factory.created, folder)
    if problems:
        raise AssertionError("tasks could not be ended: " + "; ".join(problems))


def _slug(nodeid: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in nodeid)[:200]


def _keep_failure_artifacts(control: ControlPlane, tasks: list[GatewayTask], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for task in tasks:
        records = control.evidence(task.task_id)
        if any(str(r.get("kind", "")).startswith("browser") for r in records):
            deadline = time.monotonic() + TRACE_WAIT_S
            while not any(r.get("kind") == "browser_closed" for r in records):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
                records = control.evidence(task.task_id)
        path = folder / f"gateway-evidence-{task.task_id}.json"
        path.write_text(json.dumps(records, indent=1, default=str))
        for record in records:
            trace = (record.get("data") or record).get("trace")
            if record.get("kind") == "browser_closed" and isinstance(trace, dict):
                data = control.artifact(trace["artifact_id"])
                (folder / f"task-browser-trace-{task.task_id}.zip").write_bytes(data)


# -- the task's doors -------------------------------------------------------------------


@pytest.fixture
def dashboard_sign_in(page: Any) -> None:
    """Override to sign in to the app (with pytest-playwright's `page`) before
    `dashboard_page` opens it."""


@pytest.fixture
def dashboard_url(request: pytest.FixtureRequest) -> str | None:
    """The app page `dashboard_page` opens: the `dashboard` marker's URL, else None (the
    plugin's host page). Override it where the URL is known only at run time."""
    marker = request.node.get_closest_marker("dashboard")
    if marker is None:
        return None
    url: str | None = marker.kwargs.get("url", marker.args[0] if marker.args else None)
    return url


@pytest.fixture
def dashboard_page(
    page: Any,
    gateway: GatewayHandle,
    gateway_task: TaskFactory,
    dashboard_sign_in: None,
    dashboard_url: str | None,
    request: pytest.FixtureRequest,
) -> DashboardPage:
    marker = request.node.get_closest_marker("dashboard")
    options: dict[str, Any] = {}
    if marker is not None and "hook" in marker.kwargs:
        options["hook"] = marker.kwargs["hook"]
    dashboard = DashboardPage(page, gateway.control, gateway_task(), gateway.host_origin)
    return dashboard.open(dashboard_url, **options)


@pytest.fixture
def mcp_agent(gateway: GatewayHandle, gateway_task: TaskFactory) -> Iterator[McpAgent]:
    agent = McpAgent(gateway.loop, gateway.base_url, gateway_task())
    yield agent
    agent.close()


@pytest.fixture
def bridge_client(gateway: GatewayHandle, gateway_task: TaskFactory) -> BridgeAgent:
    return BridgeAgent(gateway.loop, gateway.base_url, gateway_task())


@pytest.fixture
def evidence(gateway: GatewayHandle, gateway_task: TaskFactory) -> Evidence:
    return Evidence(gateway.control, gateway_task().task_id)
