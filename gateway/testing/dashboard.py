"""A dashboard page connected to its task's tab channel, for pytest-playwright's `page`.

`open` loads the app page (or the plugin's host page), waits for the page's handoff hook,
hands it the gateway's address and the task's tab token as an argument (never in a URL,
where logs and history would keep it), and returns once the gateway reports the task's
tab connected: the channel's word, not the page's.

The handoff hook is one function the app page defines for its tests, by default
`window.gatewayConnect({gateway, token})`, that connects with the shim as the app does in
production (`connectGateway({gateway, token, actions, view})`).
"""

from __future__ import annotations

import time
from typing import Any

from gateway.testing.agents import WebMcpAgent
from gateway.testing.control import ControlPlane, GatewayTask
from gateway.testing.evidence import Evidence

HANDOFF_HOOK = "gatewayConnect"


class NotConnected(AssertionError):
    pass


class DashboardPage:
    def __init__(
        self, page: Any, control: ControlPlane, task: GatewayTask, host_origin: str
    ) -> None:
        self.page = page
        self.control = control
        self.task = task
        self.host_origin = host_origin

    def open(
        self, url: str | None = None, *, hook: str = HANDOFF_HOOK, timeout_s: float = 30.0
    ) -> DashboardPage:
        """Load `url` (the host page when None), connect it, wait for the gateway's word."""
        timeout_ms = timeout_s * 1000
        self.page.goto(url or self.host_origin + "/")
        hooked = "(hook) => typeof window[hook] === 'function'"
        # Mostly there once the page has loaded; waiting costs a few animation frames more.
        if not self.page.evaluate(hooked, hook):
            self.page.wait_for_function(hooked, arg=hook, timeout=timeout_ms)
        # The task id is the shim's locality hint (a cluster's balancer hashes on it).
        handoff = {
            "gateway": self.control.base_url,
            "token": self.task.tab_token,
            "task": self.task.task_id,
        }
        self.page.evaluate("([hook, handoff]) => window[hook](handoff)", [hook, handoff])
        self.wait_connected(timeout_s)
        return self

    def tab(self) -> dict[str, Any]:
        """What the gateway holds for this task's tab (`connected`, `tab_id`, revision...)."""
        state: dict[str, Any] = self.control.task(self.task.task_id).get("tab") or {}
        return state

    def wait_connected(self, timeout_s: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            state = self.tab()
            if state.get("connected"):
                return state
            if time.monotonic() > deadline:
                raise NotConnected(
                    f"the gateway did not see task {self.task.task_id}'s tab connect in "
                    f"{timeout_s:g} s (last: {state})"
                )
            time.sleep(0.02)

    @property
    def log(self) -> list[dict[str, Any]]:
        """The UI actions the host page applied, in order."""
        entries: list[dict[str, Any]] = self.page.evaluate("() => window.gatewayLog || []")
        return entries

    def wait_for_action(self, action: str, count: int = 1, timeout_s: float = 10.0) -> None:
        """Until the host page has applied `action` `count` times."""
        self.page.wait_for_function(
            "([type, n]) => (window.gatewayLog || []).filter((e) => e.type === type).length >= n",
            arg=[action, count],
            timeout=timeout_s * 1000,
        )

    def webmcp(self) -> WebMcpAgent:
        """A browser agent calling the tools the page registered with WebMCP."""
        evidence = Evidence(self.control, self.task.task_id)
        return WebMcpAgent(self.page, lambda tool: evidence.calls(tool, door="webmcp"))
