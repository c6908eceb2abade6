"""The dashboard backend as the gateway's control plane.

Opening the assistant panel creates a task on the gateway for the signed-in user, with the
identity the dashboard knows to be true (actor, role, organization) and the sandbox it
assigns: a sandbox of its own that the gateway provisions (the app at a fixed commit,
`provision`), or the shared second app instance (`sandbox_origin`). The control key never
leaves this backend; the page receives only its tab token, in a same-origin JSON answer
behind the session cookie. The agent and bridge tokens stay here too, for whoever the
dashboard lets act as the agent.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx

from examples.synthetic_app.directory import User

# What a task of the dashboard may do: its own product tools, the tab's UI actions and the
# task browser. Saving a draft additionally needs the admin role (the tool says so).
TASK_SCOPES = ("agents:read", "agents:write", "evals:read", "evals:run", "ui", "browser")
# Saving a draft is left out of every task's grant: a person approves each save. An admin's
# own assistant asks the admin in the panel; a member's goes to an admin, on the admin page
# (the member's role cannot save, so only the control plane may grant it).
SAVE_TOOL = "agents.save_draft"
TASK_TOOLS = (
    "dashboard.read_view",
    "agents.prepare_draft",
    "evals.*",
    "ui.*",
    "browser.*",
)
TASK_TTL_S = 900
# A task this close to its end is replaced rather than handed out again.
RENEW_MARGIN_S = 60
# Browser tabs of one session with an assistant task each, at most (the oldest ends first).
MAX_TABS_PER_SESSION = 8
PROVISION_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class AssistantTask:
    task_id: str
    user_id: str
    org_id: str
    expires_at: float
    tokens: dict[str, str] = field(repr=False)
    created: float = field(default_factory=time.monotonic)

    @property
    def tab_token(self) -> str:
        return self.tokens["tab"]

    @property
    def agent_token(self) -> str:
        return self.tokens["agent"]

    def fresh(self, now: float) -> bool:
        return now < self.expires_at - RENEW_MARGIN_S


class ControlPlaneError(RuntimeError):
    pass


class ControlPlane:
    def __init__(
        self,
        gateway_url: str,
        control_key: str,
        *,
        sandbox_origin: str | None = None,
        provision: dict[str, Any] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if (sandbox_origin is None) == (provision is None):
            raise ValueError("give either a sandbox origin or what to provision")
        self.gateway_url = gateway_url.rstrip("/")
        self.sandbox_origin = sandbox_origin
        # `sandbox.provision` of each task: the repository and commit the gateway runs.
        self.provision = provision
        self._control_key = control_key
        self._transport = transport
        # Tasks by the dashboard session and the browser tab that opened them: each tab of
        # the dashboard gets its own task, so two tabs never supersede each other.
        self._by_session: dict[str, dict[str, AssistantTask]] = {}
        self._lock = asyncio.Lock()

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.gateway_url,
            headers={"authorization": f"Bearer {self._control_key}"},
            timeout=10.0,
            transport=self._transport,
        )

    async def task_for(
        self, session_id: str, user: User, *, tab: str = "main", renew: bool = False
    ) -> AssistantTask:
        """The live task of this session's tab, or a new one for this user.

        `renew` replaces the task even if it looks live (the page saw it end or expire).
        """
        stale: list[AssistantTask] = []
        async with self._lock:
            tabs = self._by_session.setdefault(session_id, {})
            current = tabs.get(tab)
            if (
                current is not None
                and not renew
                and current.user_id == user.id
                and current.fresh(time.time())
            ):
                return current
            task = await self._create(user)
            if current is not None:
                stale.append(current)
            tabs.pop(tab, None)
            tabs[tab] = task
            while len(tabs) > MAX_TABS_PER_SESSION:
                stale.append(tabs.pop(next(iter(tabs))))
        for old in stale:
            await self._end(old.task_id)
        return task

    def latest_for_user(self, user_id: str) -> AssistantTask | None:
        """The newest live task opened by this user (used by the demo's agent side)."""
        now = time.time()
        live = [
            task
            for tabs in self._by_session.values()
            for task in tabs.values()
            if task.user_id == user_id and task.fresh(now)
        ]
        return max(live, key=lambda task: task.created, default=None)

    def tasks_of_org(self, org_id: str) -> list[AssistantTask]:
        return [
            task
            for tabs in self._by_session.values()
            for task in tabs.values()
            if task.org_id == org_id
        ]

    async def pending_approvals(self, org_id: str) -> list[dict[str, Any]]:
        """What the organization's assistant tasks wait for someone to decide."""
        found: list[dict[str, Any]] = []
        async with self._client() as client:
            for task in self.tasks_of_org(org_id):
                response = await client.get(f"/v1/tasks/{task.task_id}/approvals")
                if response.status_code != 200:
                    continue
                for approval in response.json()["approvals"]:
                    if approval["status"] == "pending":
                        found.append({**approval, "user_id": task.user_id})
        return found

    async def decide(
        self, org_id: str, task_id: str, approval_id: str, decision: str, approver: User
    ) -> dict[str, Any]:
        """An admin's decision, after the dashboard's own check that the task is one of
        their organization's."""
        if not any(task.task_id == task_id for task in self.tasks_of_org(org_id)):
            raise ControlPlaneError("no such task in this organization")
        body = {"decision": decision, "approver": {"id": approver.id, "role": approver.role}}
        async with self._client() as client:
            response = await client.post(f"/v1/tasks/{task_id}/approvals/{approval_id}", json=body)
        if response.status_code != 200:
            raise ControlPlaneError(
                f"the gateway refused the decision ({response.status_code}): "
                f"{response.json().get('error', {}).get('message', '')}"
            )
        answer: dict[str, Any] = response.json()
        return answer

    async def end_session(self, session_id: str) -> None:
        for task in self._by_session.pop(session_id, {}).values():
            await self._end(task.task_id)

    async def close(self) -> None:
        for session_id in list(self._by_session):
            await self.end_session(session_id)

    async def _create(self, user: User) -> AssistantTask:
        body: dict[str, Any] = {
            "actor": {"id": user.id, "role": user.role},
            "org_id": user.org_id,
            "sandbox": (
                {"id": f"sb_synthetic_{user.org_id}", "provision": self.provision}
                if self.provision is not None
                else {
                    "id": f"sb_synthetic_{user.org_id}",
                    "app_origin": self.sandbox_origin,
                    "allowed_origins": [],
                }
            ),
            "scopes": list(TASK_SCOPES),
            "allowed_tools": list(TASK_TOOLS),
            "approvals": {
                "grantable": [
                    {"tool": SAVE_TOOL, "by": "actor" if user.role == "admin" else "control"}
                ],
                "channels": ["tab", "control"],
            },
            "ttl_s": TASK_TTL_S,
        }
        try:
            async with self._client() as client:
                # Provisioning checks out the app and waits for it to be healthy.
                response = await client.post(
                    "/v1/tasks", json=body, timeout=PROVISION_TIMEOUT_S if self.provision else 10.0
                )
        except httpx.HTTPError as exc:
            raise ControlPlaneError(f"the gateway is unreachable: {type(exc).__name__}") from exc
        if response.status_code != 201:
            raise ControlPlaneError(f"the gateway refused the task ({response.status_code})")
        answer = response.json()
        return AssistantTask(
            task_id=answer["task_id"],
            user_id=user.id,
            org_id=user.org_id,
            expires_at=datetime.fromisoformat(answer["expires_at"]).timestamp(),
            tokens=dict(answer["tokens"]),
        )

    async def _end(self, task_id: str) -> None:
        try:
            async with self._client() as client:
                await client.delete(f"/v1/tasks/{task_id}")
        except httpx.HTTPError:
            # The task expires on its own; ending it early is a courtesy.
            pass
