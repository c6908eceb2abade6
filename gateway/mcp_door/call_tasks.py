"""Long calls as MCP tasks: the calls a client runs in the background and polls.

MCP 2025-11-25's tasks (for 2026-07-28 clients, the `io.modelcontextprotocol/tasks`
extension, whose methods are the same). A task-augmented `tools/call` starts the call and
answers at once with its task (`working`); the call itself is the pipeline's, so its
authorization, approvals, deadline and evidence are those of a direct call. This module
keeps the tasks; `task_requests.py` speaks the protocol.

- **Statuses**: `completed` when the call `succeeded`; `failed` for every other terminal
  status (the protocol's rule for a result with `isError`); `cancelled` once the client
  cancels, which stays so however the call then ends. The `statusMessage` names the
  call's own status and code (`timeout: approval_timeout`), and the result read from the
  task is the very `CallToolResult` a direct call answers.
- **Owner**: a task belongs to the gateway task whose token created it, and any other
  token finds no such task (the same `-32602` as an unknown id), so a task id that leaks
  gives another task, or another organization, nothing to read or cancel.
- **Bounds**: a gateway task holds at most `MAX_HELD` tasks; a new one makes room by
  dropping the oldest that has finished, and is refused while every held one still works.
  Each is kept for its `ttl` (the client's ask, clamped to `MIN_TTL_MS`..`MAX_TTL_MS`), then
  dropped, its call cancelled if it still runs; ending the gateway task drops them all.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST

DEFAULT_TTL_MS = 15 * 60 * 1000
MIN_TTL_MS = 10 * 1000
MAX_TTL_MS = 60 * 60 * 1000
POLL_INTERVAL_MS = 500
MAX_HELD = 32
PAGE_SIZE = 50
# How long a cancelled call may take to record its result before whoever waits for it (a
# task's reader, the direct call's handler) lets go.
CANCEL_GRACE_S = 5.0

# Runs the call, told to stop through the event; answers what a direct call would.
CallRun = Callable[[asyncio.Event], Awaitable[types.CallToolResult]]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def kept_for(requested_ms: int | None, min_ms: int = MIN_TTL_MS) -> int:
    """The ttl a task gets for the one its client asked for."""
    if requested_ms is None:
        return DEFAULT_TTL_MS
    return max(min_ms, min(MAX_TTL_MS, requested_ms))


def status_line(result: types.CallToolResult) -> str:
    """The call's own terminal status, and code, as the task's status message."""
    public: dict[str, Any] = result.structured_content or {}
    status = str(public.get("status", "failed" if result.is_error else "succeeded"))
    error = public.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return f"{status}: {code}" if code else status


@dataclass(eq=False)
class CallTask:
    id: str
    owner: str
    tool: str
    ttl_ms: int
    created_at: str
    updated_at: str
    status: types.TaskStatus = "working"
    message: str | None = None
    result: types.CallToolResult | None = None
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    run: asyncio.Future[None] | None = None
    expiry: asyncio.TimerHandle | None = None

    @property
    def terminal(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")

    def view(self) -> types.Task:
        return types.Task(
            task_id=self.id,
            status=self.status,
            status_message=self.message,
            created_at=self.created_at,
            last_updated_at=self.updated_at,
            ttl=self.ttl_ms,
            poll_interval=POLL_INTERVAL_MS,
        )

    def _set(self, status: types.TaskStatus, message: str | None) -> None:
        self.status, self.message, self.updated_at = status, message, _now()

    def finish(self, result: types.CallToolResult | None, message: str | None) -> None:
        self.result = result
        if not self.terminal:
            failed = result is None or bool(result.is_error)
            self._set("failed" if failed else "completed", message)
        self.done.set()


class CallTasks:
    """The MCP tasks of every gateway task in this process."""

    def __init__(
        self, *, enabled: bool = True, max_held: int = MAX_HELD, min_ttl_ms: int = MIN_TTL_MS
    ) -> None:
        # Off on a node of a cluster: a poll could reach a node that holds nothing.
        self.enabled = enabled
        self.max_held = max_held
        self.min_ttl_ms = min_ttl_ms
        self._held: dict[str, CallTask] = {}
        # owner -> its tasks, oldest first
        self._by_owner: dict[str, dict[str, CallTask]] = {}

    def start(self, owner: str, tool: str, ttl_ms: int | None, run: CallRun) -> CallTask:
        mine = self._by_owner.setdefault(owner, {})
        if len(mine) >= self.max_held:
            finished = next((t for t in mine.values() if t.terminal), None)
            if finished is None:
                raise MCPError(
                    INVALID_REQUEST,
                    f"quota_exceeded: this task already runs {self.max_held} calls as tasks; "
                    "wait for one to end or cancel one",
                )
            self._drop(finished)
        now = _now()
        task = CallTask(
            id=f"mt_{secrets.token_urlsafe(18)}",
            owner=owner,
            tool=tool,
            ttl_ms=kept_for(ttl_ms, self.min_ttl_ms),
            created_at=now,
            updated_at=now,
        )
        loop = asyncio.get_running_loop()
        task.expiry = loop.call_later(task.ttl_ms / 1000, self._expire, task)
        task.run = asyncio.ensure_future(self._run(task, run))
        self._held[task.id] = task
        mine[task.id] = task
        return task

    def find(self, owner: str, task_id: str) -> CallTask:
        task = self._held.get(task_id)
        if task is None or task.owner != owner:
            # Another task's id reads exactly as one that never was.
            raise MCPError(INVALID_PARAMS, f"no task {task_id!r}: unknown, expired or not yours")
        return task

    def page(self, owner: str, cursor: str | None) -> tuple[list[CallTask], str | None]:
        mine = list(self._by_owner.get(owner, {}).values())
        start = 0
        if cursor is not None:
            ids = [t.id for t in mine]
            if cursor not in ids:
                raise MCPError(INVALID_PARAMS, "invalid cursor")
            start = ids.index(cursor)
        chosen = mine[start : start + PAGE_SIZE]
        rest = mine[start + PAGE_SIZE :]
        return chosen, rest[0].id if rest else None

    def cancel(self, owner: str, task_id: str) -> CallTask:
        task = self.find(owner, task_id)
        if task.terminal:
            raise MCPError(INVALID_PARAMS, f"task {task_id!r} is already {task.status}")
        task._set("cancelled", "cancelled by the client")
        task.cancel.set()
        return task

    async def result(self, owner: str, task_id: str) -> types.CallToolResult:
        """The task's result, once its call has ended (waiting for it until then)."""
        task = self.find(owner, task_id)
        if task.status == "cancelled":
            # The call was told to stop; its record of that comes shortly, or not at all.
            try:
                await asyncio.wait_for(task.done.wait(), CANCEL_GRACE_S)
            except TimeoutError:
                raise MCPError(INTERNAL_ERROR, f"task {task_id!r} was cancelled") from None
        else:
            await task.done.wait()
        if task.result is None:
            raise MCPError(INTERNAL_ERROR, f"task {task_id!r} ended without a result")
        return task.result

    def forget(self, owner: str) -> None:
        """The gateway task ended: stop and drop every task of it."""
        for task in list(self._by_owner.get(owner, {}).values()):
            task.cancel.set()
            self._drop(task)

    def held(self, owner: str) -> int:
        return len(self._by_owner.get(owner, {}))

    def owners(self) -> set[str]:
        """The gateway tasks that hold any MCP task."""
        return set(self._by_owner)

    async def _run(self, task: CallTask, run: CallRun) -> None:
        try:
            result = await run(task.cancel)
        except asyncio.CancelledError:
            task.finish(None, "the gateway stopped")
            raise
        except Exception:  # a door failure, not the call's: the pipeline records those
            task.finish(None, "the call ended without a result")
            return
        task.finish(result, status_line(result))

    def _expire(self, task: CallTask) -> None:
        task.cancel.set()
        self._drop(task)

    def _drop(self, task: CallTask) -> None:
        if task.expiry is not None:
            task.expiry.cancel()
        self._held.pop(task.id, None)
        mine = self._by_owner.get(task.owner)
        if mine is not None:
            mine.pop(task.id, None)
            if not mine:
                del self._by_owner[task.owner]
