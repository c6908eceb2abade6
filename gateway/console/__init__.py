"""The operator console: the gateway's tasks as a person looks at them.

Pages under `/console` (docs/console.md): the list of tasks with live counts, each task's
timeline from the evidence store, its pending approvals answerable by the control plane's
party, the task browser's trace in Playwright's own viewer (served from the gateway), and
an export of a task as one archive. Behind the control key (a sign-in page makes a session
of it) or the host's own sign-in (`HostSignIn` in `gw.services`); never a task token.
"""

from __future__ import annotations

from starlette.routing import BaseRoute

from gateway.console.access import HostCheck, HostSignIn, Viewer, host_viewer
from gateway.console.links import BASE
from gateway.console.routes import routes
from gateway.core.approvals.channels import ApprovalPage
from gateway.runtime import Gateway

__all__ = ["HostCheck", "HostSignIn", "Viewer", "host_viewer", "install"]


def install(gw: Gateway) -> list[BaseRoute]:
    # The page an MCP client's URL-mode elicitation links to, on the gateway's own host.
    gw.services.provide(ApprovalPage, ApprovalPage(f"{gw.settings.base_url}{BASE}/approvals/"))
    return routes(gw)
