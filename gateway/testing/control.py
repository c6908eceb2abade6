"""The control plane's side of a gateway, synchronously: create, read and end tasks, read
their evidence and artifacts, answer their approvals. It speaks only HTTP, so a gateway
started by the test session and one already running elsewhere are driven the same way."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from gateway.testing.live import task_body


class ControlError(AssertionError):
    """The gateway refused a control-plane request the test relied on."""

    def __init__(self, what: str, response: httpx.Response) -> None:
        super().__init__(f"{what}: {response.status_code} {response.text[:500]}")
        self.status_code = response.status_code


def _answer(response: httpx.Response, what: str, expected: int = 200) -> Any:
    """The JSON body of an answer with the `expected` status; else a ControlError."""
    if response.status_code != expected:
        raise ControlError(what, response)
    return response.json()


@dataclass(frozen=True)
class GatewayTask:
    """One task as the control plane created it: its identity and its three tokens."""

    task_id: str
    org_id: str
    actor_id: str
    role: str
    tokens: dict[str, str]
    created: dict[str, Any] = field(repr=False)

    @property
    def agent_token(self) -> str:
        return self.tokens["agent"]

    @property
    def tab_token(self) -> str:
        return self.tokens["tab"]

    @property
    def bridge_token(self) -> str:
        return self.tokens["bridge"]

    @property
    def bridge_envelope(self) -> dict[str, Any]:
        envelope: dict[str, Any] = self.created["parent_tool_bridge"]
        return envelope


class ControlPlane:
    def __init__(self, base_url: str, control_key: str, *, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.control_key = control_key
        self.http = httpx.Client(
            base_url=self.base_url,
            headers={"authorization": f"Bearer {control_key}"},
            timeout=timeout_s,
        )

    def close(self) -> None:
        self.http.close()

    def healthy(self) -> bool:
        try:
            return self.http.get("/healthz").status_code == 200
        except httpx.HTTPError:
            return False

    def create_task(
        self,
        *,
        actor: str = "user_1",
        role: str = "member",
        org: str = "org_a",
        scopes: Sequence[str] = ("ui",),
        tools: Sequence[str] | None = None,
        origins: Sequence[str] = (),
        app_origin: str | None = None,
        budget: dict[str, Any] | None = None,
        approvals: dict[str, Any] | None = None,
        ttl_s: int | None = None,
    ) -> GatewayTask:
        """A task for `actor` of `org`; `tools` narrows it to those tools (names or
        patterns), `origins` are the app origins its browser may reach (the first is the
        sandbox app's)."""
        listed = list(origins)
        extra: dict[str, Any] = {}
        if budget is not None:
            extra["budget"] = budget
        if approvals is not None:
            extra["approvals"] = approvals
        if ttl_s is not None:
            extra["ttl_s"] = ttl_s
        body = task_body(
            org=org,
            actor=actor,
            role=role,
            scopes=scopes,
            allowed_tools=tools,
            app_origin=app_origin or (listed[0] if listed else "http://127.0.0.1:9"),
            allowed_origins=listed[1:],
            **extra,
        )
        response = self.http.post("/v1/tasks", json=body)
        created: dict[str, Any] = _answer(response, "the gateway refused the task", 201)
        return GatewayTask(created["task_id"], org, actor, role, created["tokens"], created)

    def task(self, task_id: str) -> dict[str, Any]:
        body: dict[str, Any] = _answer(
            self.http.get(f"/v1/tasks/{task_id}"), f"task {task_id} could not be read"
        )
        return body

    def end_task(self, task_id: str) -> dict[str, Any]:
        body: dict[str, Any] = _answer(
            self.http.delete(f"/v1/tasks/{task_id}"), f"task {task_id} could not be ended"
        )
        return body

    def evidence(self, task_id: str) -> list[dict[str, Any]]:
        """Every record of the task, in order (read page by page)."""
        records: list[dict[str, Any]] = []
        after = 0
        while True:
            response = self.http.get(
                f"/v1/tasks/{task_id}/evidence", params={"after": after, "limit": 5000}
            )
            what = f"the evidence of {task_id} could not be read"
            page: list[dict[str, Any]] = _answer(response, what)["records"]
            records += page
            if len(page) < 5000:
                return records
            after = int(page[-1]["seq"])

    def artifact(self, artifact_id: str) -> bytes:
        response = self.http.get(f"/v1/artifacts/{artifact_id}")
        if response.status_code != 200:
            raise ControlError(f"artifact {artifact_id} could not be read", response)
        return response.content

    def approvals(self, task_id: str) -> list[dict[str, Any]]:
        response = self.http.get(f"/v1/tasks/{task_id}/approvals")
        what = f"the approvals of {task_id} could not be read"
        listed: list[dict[str, Any]] = _answer(response, what)["approvals"]
        return listed

    def decide(
        self,
        task_id: str,
        approval_id: str,
        decision: str = "approve",
        *,
        approver: str = "reviewer",
        role: str = "admin",
        scope: str = "call",
    ) -> dict[str, Any]:
        """Answer as the control plane (a person of the product, named by `approver`)."""
        body = {"decision": decision, "scope": scope, "approver": {"id": approver, "role": role}}
        response = self.http.post(f"/v1/tasks/{task_id}/approvals/{approval_id}", json=body)
        what = f"approval {approval_id} could not be decided"
        decided: dict[str, Any] = _answer(response, what)
        return decided
