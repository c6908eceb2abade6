"""Approval requests: stored under the task's owner, delivered, answered once, awaited.

`ask` stores a request (tool, the digest of the validated input, a text-only summary, the
door, the call, its expiry), delivers it to the task's channels, and waits for its one
outcome: approved (the call runs with exactly the input approved), denied, expired, or
cancelled (the caller went away, or the task ended). `decide` takes an answer from a
channel; the store's conditional update makes the first answer the only one, so a second
answer, a replay, or an answer after expiry is refused. Every request and decision is
evidence: who, when, through which channel, for which input digest.

Here the desk itself: the requests it holds, stored, shown and settled; how a call waits
for its outcome is `waiting.py`, whether an answer may settle a request `answering.py`, and
what a person granted for the rest of a task `grants.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from gateway.core.approval_policy import Need
from gateway.core.approvals.answering import checked_answer
from gateway.core.approvals.config import ApprovalsConfig
from gateway.core.approvals.grants import TaskGrants
from gateway.core.approvals.question import Question
from gateway.core.approvals.request import (
    ApprovalConflict,
    ApprovalRefused,
    ApprovalRequest,
    Decision,
    Status,
)
from gateway.core.approvals.summary import default_summary, text_only, without
from gateway.core.approvals.waiting import await_outcome
from gateway.core.errors import GatewayError, InvalidInput, NotFound, QuotaExceeded
from gateway.core.evidence import EventLog
from gateway.core.identity import TaskIdentity
from gateway.core.ids import new_id
from gateway.core.ports import Elicit
from gateway.core.store.database import Store

log = logging.getLogger(__name__)

Listener = Callable[[ApprovalRequest], None]


class Approvals:
    def __init__(
        self,
        store: Store,
        events: EventLog,
        config: ApprovalsConfig,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.max_pending_per_task = config.max_pending_per_task
        self.events = events
        self._clock = clock
        self._pending: dict[str, ApprovalRequest] = {}
        # The request's row and its evidence, being committed while the request is already
        # on its way to the person.
        self._stored: dict[str, asyncio.Future[None]] = {}
        self._identities: dict[str, TaskIdentity] = {}
        self._waiters: dict[str, asyncio.Future[ApprovalRequest]] = {}
        self._grants = TaskGrants(store)
        self._listeners: list[Listener] = []

    async def recover(self) -> None:
        """At start: requests a stopped process left pending are cancelled (their calls are
        gone with it)."""
        closed = await self.store.close_orphaned_approvals(self._clock())
        if closed:
            log.info("%d approvals left pending by the last run were cancelled", closed)

    def on_change(self, listener: Listener) -> None:
        """Hear of every request when it is made and when it closes, whatever the outcome
        (the tab hub shows it in the task's tab, then takes it away)."""
        self._listeners.append(listener)

    def _tell(self, request: ApprovalRequest) -> None:
        for listener in list(self._listeners):
            try:
                listener(request)
            except Exception:
                log.exception("an approval listener failed")

    # -- grants for the task ----------------------------------------------------------

    async def granted(self, task_id: str, tool: str, need: Need) -> dict[str, Any] | None:
        """What a person granted for the rest of the task that answers exactly this need of
        this tool, if anything (grants.py)."""
        return await self._grants.granted(task_id, tool, need)

    async def grants(self, task_id: str) -> dict[str, dict[str, Any]]:
        """The tools granted for the rest of the task (the gate in front of each), by id."""
        return await self._grants.grants(task_id)

    async def granted_asks(self, task_id: str) -> list[dict[str, Any]]:
        """The tools' own asks granted for the rest of the task."""
        return await self._grants.granted_asks(task_id)

    # -- asking -----------------------------------------------------------------------

    async def ask(self, question: Question) -> ApprovalRequest:
        """Store, deliver and await one request; the approved request, or a ToolFailure.

        `summary` and `details` are redacted here, once, on evidence's rules, before the
        request is stored, shown or sent anywhere; `secret_values` (the call's secret input
        fields) are taken out of them first."""
        identity, need, tool, door = question.identity, question.need, question.tool, question.door
        policy = identity.approvals
        call_id, input_digest, summary = question.call_id, question.input_digest, question.summary
        details, secret_values = question.details, question.secret_values
        cancel, progress, elicit = question.cancel, question.progress, question.elicit
        waiting = sum(r.status == "pending" for r in self.pending(identity.task_id))
        if waiting >= self.max_pending_per_task:
            # Nothing is stored or shown: the call ends here, and a retry once one of
            # the task's requests is answered can be asked.
            raise QuotaExceeded(
                f"this task already has {waiting} approvals waiting for a person, its "
                f"limit; {tool} was not asked for and did not run",
                details={
                    "quota": "pending_approvals",
                    "limit": self.max_pending_per_task,
                    "current": waiting,
                    "adding": 1,
                },
            )
        now = self._clock()
        request = ApprovalRequest(
            id=new_id("apr"),
            task_id=identity.task_id,
            org_id=identity.org_id,
            call_id=call_id,
            tool=tool,
            door=door.value,
            input_sha256=input_digest,
            summary=self._redacted(text_only(summary), secret_values),
            details=self._redacted(details or {}, secret_values),
            by=need.by,
            channels=policy.channels,
            created_at=now,
            expires_at=now + policy.timeout_s,
            reason=need.reason,
        )
        # Queued now, before anyone can answer: the store's writer keeps order, so any
        # decision finds the row.
        stored = self.store.enqueue_approval(
            {**request.public(), "org_id": request.org_id},
            request.nonce,
            [self._row(identity, "approval.requested", request, {"reason": need.reason})],
        )
        self._stored[request.id] = stored
        self._identities[request.id] = identity
        self._pending[request.id] = request
        waiter: asyncio.Future[ApprovalRequest] = asyncio.get_running_loop().create_future()
        self._waiters[request.id] = waiter
        # Shown first, stored meanwhile: the commit overlaps the way to the person.
        self._tell(request)
        try:
            await asyncio.shield(stored)
        except BaseException:
            self._forget(request.id)
            self._tell_closed(request, "cancelled")
            raise
        helpers = []
        # The door offers only what its channel may answer (a form inside the grant, else a
        # link to a person's page), and an elicited answer outside the rule is refused.
        if elicit is not None and "elicitation" in request.channels:
            helpers.append(asyncio.ensure_future(self._elicit(identity, request, elicit)))
        try:
            await await_outcome(
                request,
                waiter,
                clock=self._clock,
                close=lambda status: self._close(identity, request, status),
                cancel=cancel,
                progress=progress,
            )
        finally:
            for helper in helpers:
                helper.cancel()
            self._forget(request.id)
        return request

    def _redacted(self, value: Any, secret_values: Iterable[str]) -> Any:
        hidden = sorted({v for v in secret_values if v}, key=len, reverse=True)
        return self.events.redactor.value(without(value, hidden))

    def _forget(self, approval_id: str) -> None:
        self._waiters.pop(approval_id, None)
        self._pending.pop(approval_id, None)
        self._stored.pop(approval_id, None)
        self._identities.pop(approval_id, None)

    def _tell_closed(self, request: ApprovalRequest, status: Status) -> None:
        request.status = status
        self._tell(request)

    async def _elicit(
        self, identity: TaskIdentity, request: ApprovalRequest, elicit: Elicit
    ) -> None:
        try:
            answer = await elicit(request.public())
            if answer is not None:
                decision, scope = answer
                await self.answer(
                    identity, request.id, decision=decision, scope=scope, channel="elicitation"
                )
        except GatewayError as exc:
            log.info("an elicited answer to %s was refused: %s", request.id, exc)
        except Exception as exc:
            # The client could not be asked (no back channel, it went away): the other
            # channels still can answer.
            log.info("elicitation for %s failed: %r", request.id, exc)

    async def _close(
        self, identity: TaskIdentity, request: ApprovalRequest, status: Status
    ) -> bool:
        """End a request without a decision (expired, cancelled), if it is still pending."""
        closed = self._row(identity, "approval.closed", request, {"status": status})
        if not await self.store.settle_approval(request.id, status, None, self._clock(), [closed]):
            return False
        self._tell_closed(request, status)
        return True

    # -- answering --------------------------------------------------------------------

    def pending(self, task_id: str) -> list[ApprovalRequest]:
        return [r for r in self._pending.values() if r.task_id == task_id]

    def task_ids(self) -> set[str]:
        """Tasks this desk holds anything for (a pending request, cached grants)."""
        return {r.task_id for r in self._pending.values()} | self._grants.task_ids()

    def find(self, approval_id: str) -> ApprovalRequest | None:
        return self._pending.get(approval_id)

    async def decide(
        self,
        identity: TaskIdentity,
        approval_id: str,
        decision: Decision,
        *,
        nonce: str | None = None,
    ) -> ApprovalRequest:
        """One answer for a request of the task `identity` names. From the tab or the
        agent's client, the approver is the task's own user, whatever the answer says."""
        task_id = identity.task_id
        request = self._pending.get(approval_id)
        if request is None or request.task_id != task_id:
            stored = next(
                (
                    a
                    for a in await self.store.approvals_of(task_id)
                    if a["approval_id"] == approval_id
                ),
                None,
            )
            if stored is not None:
                raise ApprovalConflict(f"the approval is {stored['status']}, not pending")
            raise NotFound("no such approval for this task")
        decision = checked_answer(identity, request, decision, nonce=nonce, now=self._clock())
        status: Status = "approved" if decision.decision == "approve" else "denied"
        if status == "approved" and decision.scope == "task":
            # One at a time: whether the need is granted already is read and the grant
            # written in one turn, so two answers "for this task" never both write it.
            async with self._grants.granting:
                await self._settle(identity, request, decision, status, grants=True)
        else:
            await self._settle(identity, request, decision, status, grants=False)
        waiter = self._waiters.get(approval_id)
        if waiter is not None and not waiter.done():
            waiter.set_result(request)
        return request

    async def _settle(
        self,
        identity: TaskIdentity,
        request: ApprovalRequest,
        decision: Decision,
        status: Status,
        *,
        grants: bool,
    ) -> None:
        public = decision.public()
        rows = [self._row(identity, "approval.decided", request, {**public, "status": status})]
        held: dict[str, dict[str, Any]] | None = None
        grant = None
        if grants:
            held, grant = await self._grants.grant_for(request, public["approver"], self._clock())
            if grant is not None:
                key = request.need.grant_key(request.tool)
                rows.append(self.store.grant_row(identity.task_id, key, grant))
        if not await self.store.settle_approval(request.id, status, public, self._clock(), rows):
            raise ApprovalConflict("the approval is already decided")
        request.status, request.decision = status, decision
        request.nonce = ""  # spent
        if held is not None:
            self._grants.granted_now(request, held, grant)
        self._tell(request)

    async def answer(
        self,
        identity: TaskIdentity,
        approval_id: str,
        *,
        decision: str,
        scope: str,
        channel: str,
        nonce: str | None = None,
        message: str | None = None,
    ) -> None:
        """`decide` from a channel's plain words (the tab's frame, an elicitation form)."""
        if decision not in ("approve", "deny") or scope not in ("call", "task"):
            raise InvalidInput("decision is approve or deny; scope is call or task")
        if channel not in ("tab", "elicitation"):
            raise ApprovalRefused(f"answers through {channel!r} go to the control endpoint")
        await self.decide(
            identity,
            approval_id,
            Decision(
                decision,  # type: ignore[arg-type]
                scope,  # type: ignore[arg-type]
                channel=channel,  # type: ignore[arg-type]
                message=message,
            ),
            nonce=nonce,
        )

    async def task_ended(self, task_id: str, _reason: str) -> None:
        """Ending the task cancels its pending approvals."""
        for request in self.pending(task_id):
            stored = self._stored.get(request.id)
            if stored is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(stored)
            identity = self._identities.get(request.id)
            rows = (
                [self._row(identity, "approval.closed", request, {"status": "cancelled"})]
                if identity is not None
                else []
            )
            if await self.store.settle_approval(request.id, "cancelled", None, self._clock(), rows):
                self._tell_closed(request, "cancelled")
                waiter = self._waiters.get(request.id)
                if waiter is not None and not waiter.done():
                    waiter.set_result(request)
        self._grants.forget(task_id)

    async def listing(self, task_id: str) -> list[dict[str, Any]]:
        # A request is shown while its row is being committed: a listing waits for the
        # rows of the task's pending requests, so what a tab shows is always listed.
        storing = [self._stored[r.id] for r in self.pending(task_id) if r.id in self._stored]
        await asyncio.gather(*(asyncio.shield(f) for f in storing), return_exceptions=True)
        return await self.store.approvals_of(task_id)

    def _row(
        self, identity: TaskIdentity, kind: str, request: ApprovalRequest, data: dict[str, Any]
    ) -> tuple[Any, dict[str, Any]]:
        """Evidence of a request or its outcome, committed with the change it records."""
        _, row = self.events.row(
            identity,
            kind,
            {
                "approval_id": request.id,
                "call_id": request.call_id,
                "tool": request.tool,
                "door": request.door,
                "input_sha256": request.input_sha256,
                "by": request.by,
                "status": request.status,
                **data,
            },
        )
        return row


__all__ = [
    "ApprovalConflict",
    "ApprovalRefused",
    "ApprovalRequest",
    "Approvals",
    "Decision",
    "default_summary",
]
