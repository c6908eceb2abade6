"""`/v1/tasks/{id}/approvals`: what a task waits for a person to decide, and the control
plane's answer (for hosts whose backend decides after its own user check).

The listing is read by those who may answer it: the control plane and the task's tab. The
agent and the bridge act under the grant being decided, so they learn of a request through
their call's own result, not by reading what the person is asked.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, StringConstraints
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from gateway.core.approvals.broker import Decision
from gateway.core.errors import AuthError, Forbidden, InvalidInput
from gateway.core.identity import Name, TaskIdentity
from gateway.core.tokens import Purpose
from gateway.http.edge import credential, gateway_access, parse_body, read_json
from gateway.runtime import Gateway

# The errand a node sends the task's owner with a control-plane decision.
DECIDE = "approval.decide"


class Approver(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: Name
    role: Name


class ControlDecision(BaseModel):
    """The body of `POST /v1/tasks/{id}/approvals/{approval_id}`."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "deny"]
    scope: Literal["call", "task"] = "call"
    approver: Approver
    message: Annotated[str, StringConstraints(max_length=1000)] | None = None


def routes(gw: Gateway) -> list[BaseRoute]:
    access = gateway_access(gw)

    async def listing(request: Request) -> Response:
        task_id = request.path_params["task_id"]
        # A token of another task is 404 and a bad one 401, whatever its purpose.
        member = await access.task_member(request, task_id)
        if member is not None:
            try:
                gw.tasks.claims(credential(request), Purpose.TAB)
            except AuthError:
                raise Forbidden(
                    "a task's approvals are read by those who answer them: the control "
                    "plane and the task's tab"
                ) from None
        await gw.tasks.get(task_id)
        return JSONResponse(
            {
                "task_id": task_id,
                "approvals": await gw.approvals.listing(task_id),
                "grants": await gw.approvals.grants(task_id),
                "granted_asks": await gw.approvals.granted_asks(task_id),
            }
        )

    async def decide_here(identity: TaskIdentity, errand: dict[str, Any]) -> dict[str, Any]:
        # Checked again where it is done: the errand may come from a node of another version.
        answer = parse_body(ControlDecision, errand.get("answer"), "the decision is invalid")
        approval_id = errand.get("approval_id")
        if not isinstance(approval_id, str):
            raise InvalidInput("the approval id is missing")
        decided = await gw.approvals.decide(
            identity,
            approval_id,
            Decision(
                answer.decision,
                answer.scope,
                answer.approver.id,
                answer.approver.role,
                "control",
                answer.message,
            ),
        )
        return decided.public()

    async def decide(request: Request) -> Response:
        access.require_control(request)
        task_id = request.path_params["task_id"]
        record = await gw.tasks.get(task_id)
        body = await read_json(request, gw.settings.max_body_bytes)
        answer = parse_body(ControlDecision, body, "the decision is invalid")
        errand = {"approval_id": request.path_params["approval_id"], "answer": answer.model_dump()}
        if gw.placement is not None:
            # The request waits on the task's owner, which may be another node.
            decided = await gw.placement.at_owner(task_id, DECIDE, errand)
            if decided is not None:
                return JSONResponse(decided)
        return JSONResponse(await decide_here(record.identity, errand))

    if gw.placement is not None:
        gw.placement.serve_errand(DECIDE, decide_here)

    return [
        Route("/v1/tasks/{task_id}/approvals", listing, methods=["GET"]),
        Route("/v1/tasks/{task_id}/approvals/{approval_id}", decide, methods=["POST"]),
    ]
