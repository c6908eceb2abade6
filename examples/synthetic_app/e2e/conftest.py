"""The example dashboard's end-to-end suite, on the gateway's pytest plugin.

A team's suite would point the plugin at its running gateway (`--gateway-url`,
`--gateway-control-key`) and its app; this one starts the example stack itself (the
gateway with the example's product tools, the dashboard, the sandbox instance), so that
`make test` needs nothing running. Two fixtures are the app's part of the contract:
`gateway_endpoint` (where the gateway is) and `dashboard_sign_in` (how a person signs in).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from examples.synthetic_app.control import SAVE_TOOL, TASK_SCOPES, TASK_TOOLS
from examples.synthetic_app.directory import USERS
from examples.synthetic_app.serve import ExampleStack, running_stack
from gateway.testing import test_settings
from gateway.testing.loop_thread import LoopThread
from gateway.testing.pytest_plugin import GatewayEndpoint


@pytest.fixture(scope="session")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExampleStack]:
    """The example stack on free loopback ports, for the whole session."""
    loop = LoopThread("example-stack")
    settings = test_settings(tmp_path_factory.mktemp("example"), example=True)
    try:
        stack, leave = loop.enter(running_stack(settings, step_s=0.05), timeout=120)
        try:
            yield stack
        finally:
            leave(60)
    finally:
        loop.close()


@pytest.fixture(scope="session")
def gateway_endpoint(example: ExampleStack) -> GatewayEndpoint:
    key = example.gateway.settings.control_key
    assert key is not None
    return GatewayEndpoint(example.gateway_url, key)


def assistant_task(user: str, **changes: Any) -> dict[str, Any]:
    """The task the dashboard's own control plane would make for `user`."""
    person = USERS[user]
    fields: dict[str, Any] = {
        "actor": person.id,
        "role": person.role,
        "org": person.org_id,
        "scopes": TASK_SCOPES,
        "tools": TASK_TOOLS,
        "approvals": {
            "grantable": [
                {"tool": SAVE_TOOL, "by": "actor" if person.role == "admin" else "control"}
            ],
            "channels": ["tab", "control"],
        },
    }
    return {**fields, **changes}


@pytest.fixture
def dashboard_sign_in(page: Any, example: ExampleStack, request: pytest.FixtureRequest) -> None:
    """Sign in as the actor of the test's task, as a person would: on the sign-in page."""
    marker = request.node.get_closest_marker("gateway_task")
    user = marker.kwargs["actor"] if marker else "ada"
    page.goto(f"{example.dashboard_url}/signin")
    page.click(f'[data-testid="signin-{user}"]')
    page.wait_for_url("**/agents")


@pytest.fixture
def dashboard_url(example: ExampleStack) -> str:
    """The dashboard's agents page: where its assistant panel connects."""
    return f"{example.dashboard_url}/agents"
