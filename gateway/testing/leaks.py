"""What a gateway still holds for tasks that have ended: it must be nothing.

Ending a task releases its browser context, its tab channel and its MCP sessions; a part
that forgets to is a leak a user would notice (a context open for hours, a session table
that fills up). `leaks(gw)` lists what is still held after every task has ended.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.runtime import Gateway


@dataclass(frozen=True)
class Leaked:
    kind: str  # "browser context", "tab channel", "MCP session", "sandbox", "live task"
    task_id: str

    def __str__(self) -> str:
        return f"{self.kind} of {self.task_id}"


def leaks(gw: Gateway, ended: set[str] | None = None) -> list[Leaked]:
    """What `gw` holds for the tasks in `ended` (default: every task it knows has ended)."""
    from gateway.browser import BrowserPool
    from gateway.mcp_door import McpDoor
    from gateway.tabs import TabHub

    found: list[Leaked] = []
    done = ended if ended is not None else gw.tasks.ended_ids()
    found += [Leaked("approval", t) for t in gw.approvals.task_ids() if t in done]
    pool = gw.services.find(BrowserPool)
    if pool is not None:
        found += [Leaked("browser context", t) for t in pool.task_ids() if t in done]
    hub = gw.services.find(TabHub)
    if hub is not None:
        found += [Leaked("tab channel", t) for t in hub.connected_task_ids() if t in done]
    from gateway.sandbox.service import Sandboxes

    sandboxes = gw.services.find(Sandboxes)
    if sandboxes is not None:
        found += [Leaked("sandbox", t) for t in done if sandboxes.handle_of(t) is not None]
    door = gw.services.find(McpDoor)
    if door is not None:
        found += [Leaked("MCP session", t) for t in door.sessions.task_ids() if t in done]
        found += [Leaked("MCP task", t) for t in door.call_tasks.owners() if t in done]
    return found
