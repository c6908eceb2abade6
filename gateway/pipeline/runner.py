"""The `Pipeline`: runs one call through the steps to exactly one recorded terminal result."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from gateway.approvals.broker import Approvals
from gateway.errors import GatewayError, StorageError, ToolFailure
from gateway.evidence_log import EventLog
from gateway.identity import TaskIdentity
from gateway.ids import new_id
from gateway.metrics import Metrics
from gateway.ports import Elicit, Placement
from gateway.recording import declared_secrets, input_digest, recorded_input, recorded_output
from gateway.redaction import Redactor
from gateway.registry import ProgressFn, Registry, Services, Tool, ToolContext
from gateway.results import Door, ErrorCode, ToolError, ToolResult, ToolStatus
from gateway.store.database import Store
from gateway.tasks import TaskService

from . import steps
from .asking import Asking, approve, asker
from .deadline import run_handler
from .keys import KeyLocks
from .record import Call, TaskUsage, lost_owner

log = logging.getLogger(__name__)


class Pipeline:
    def __init__(
        self,
        registry: Registry,
        tasks: TaskService,
        store: Store,
        services: Services,
        redactor: Redactor,
        metrics: Metrics,
        events: EventLog,
        approvals: Approvals | None = None,
    ) -> None:
        self.approvals = approvals
        self.registry = registry
        self.tasks = tasks
        self.store = store
        self.services = services
        self.redactor = redactor
        self.metrics = metrics
        self.events = events
        self._usage: dict[str, TaskUsage] = {}
        # Set when this gateway is a node of a cluster: calls run on their task's owner.
        self.placement: Placement | None = None
        # Handlers running, by task: a node that loses a task cancels them.
        self._handlers: dict[str, set[asyncio.Future[Any]]] = {}
        self._keys = KeyLocks()

    async def call(
        self,
        identity: TaskIdentity,
        tool_name: str,
        raw_input: Any,
        *,
        door: Door,
        idempotency_key: str | None = None,
        progress: ProgressFn | None = None,
        cancel: asyncio.Event | None = None,
        call_id: str | None = None,
        elicit: Elicit | None = None,
        routed: bool = False,
    ) -> ToolResult:
        """Run one call to its terminal result. Never raises for a call-level failure.

        `elicit`, from a door that can ask the person at the agent's client, is one more
        channel for the approvals this call may need. `routed`: the call was sent here by
        another node of the cluster, as to the task's owner; it runs here."""
        call_id = call_id or new_id("call")
        tool_name = steps.printable_name(tool_name)
        tool = self.registry.get(tool_name)
        if tool is not None:
            # Called by its id or by its exposed name: evidence and results name the id.
            tool_name = tool.name
        asking = Asking(progress, cancel, elicit, routed)
        if tool is None or not tool.side_effects or not idempotency_key:
            return await self._call(
                identity, tool_name, raw_input, door, idempotency_key, asking, call_id
            )
        # Calls under one idempotency key run one at a time, and the lock is held until the
        # first one's record is committed: a concurrent replay then finds it in the store.
        async with self._keys.held(identity.task_id, tool.name, idempotency_key):
            return await self._call(
                identity, tool_name, raw_input, door, idempotency_key, asking, call_id
            )

    async def _call(
        self,
        identity: TaskIdentity,
        tool_name: str,
        raw_input: Any,
        door: Door,
        idempotency_key: str | None,
        asking: Asking,
        call_id: str,
    ) -> ToolResult:
        call = Call(identity, tool_name, door, call_id, idempotency_key, raw_input)
        tool = self.registry.get(tool_name)
        try:
            tool = steps.known(tool, call.tool_name)
            record = await self.tasks.record(identity.task_id)
            steps.check_task(record, self.tasks.status_of(record) if record else None)
            need = steps.authorize(identity, tool, self.approvals is not None)
            if self.placement is not None and not asking.routed:
                # The checks above need nothing of the task's owner; the rest runs there.
                call.routing = True
                answer = await self.placement.elsewhere(
                    identity,
                    tool.name,
                    raw_input,
                    door=call.door,
                    idempotency_key=idempotency_key,
                    call_id=call.call_id,
                    timeout_s=tool.timeout_s,
                )
                if answer is not None:
                    return answer
                call.routing = False
            self._admit_evidence(call, tool)
            usage = await self._usage_of(identity.task_id)
            steps.charge_budget(identity, tool, usage)
            call.charged = True
            args = steps.validate(tool, raw_input)
            call.input = args.model_dump(mode="json")
            call.context = ToolContext(
                identity=identity,
                call_id=call.call_id,
                tool=tool,
                door=call.door,
                services=self.services,
                progress=asking.progress,
                asker=asker(self.approvals, call, asking) if self.approvals is not None else None,
                secrets=declared_secrets(args),
            )
            keyed = tool.side_effects and idempotency_key is not None
            recorded = (
                await self.store.idempotent_result(identity.task_id, tool.name, idempotency_key)
                if keyed and idempotency_key is not None
                else None
            )
            digest = input_digest(call.input) if keyed or need is not None else ""
            if recorded is not None:
                if recorded.input_sha256 not in (None, digest):
                    raise ToolFailure(
                        ToolStatus.FAILED,
                        ErrorCode.CONFLICT,
                        f"idempotency key {idempotency_key!r:.80} was used by call "
                        f"{recorded.call_id} with another input; nothing was run (a new "
                        "request needs a new key)",
                        details={"call_id": recorded.call_id},
                    )
                prior = ToolResult.model_validate_json(recorded.result_json)
                call.replayed = True
                call.status, call.output, call.error = prior.status, prior.output, prior.error
                call.truncated = prior.truncated
            else:
                if need is not None:
                    assert self.approvals is not None
                    await approve(self.approvals, call, tool, need, digest, asking)
                if self.placement is not None and tool.side_effects:
                    call.epoch = await self.placement.fence(
                        identity, tool.name, idempotency_key if keyed else None, call.call_id
                    )
                call.side_effect = tool.side_effects
                usage.side_effects += int(tool.side_effects)
                value = await run_handler(
                    tool, call.context, args, asking.cancel, asking.pause, self._started(identity)
                )
                call.output, call.truncated = steps.bound_output(value, tool.max_output_bytes)
                if keyed and idempotency_key is not None:
                    # Committed with the call's evidence, in one transaction, before the
                    # result is returned: after a crash a replay finds it, or the call
                    # was never answered.
                    call.idempotency_row = self.store.idempotency_row(
                        identity.task_id,
                        tool.name,
                        idempotency_key,
                        call.call_id,
                        call.result().model_dump_json(),
                        digest,
                    )
        except GatewayError as exc:
            call.status, call.error = exc.tool_status, exc.to_tool_error()
        except asyncio.CancelledError:
            # The caller went away: the call still ends in one recorded terminal result.
            call.status, call.output = ToolStatus.FAILED, None
            call.error = ToolError(
                code=ErrorCode.CANCELLED, message="the caller cancelled the call"
            )
            await asyncio.shield(self._finish(call))
            raise
        return await self._finish(call)

    def _admit_evidence(self, call: Call, tool: Tool) -> None:
        """A call the evidence writer is too far behind for is shed: its record then does
        not wait, and `steps.admit_evidence` turns it away."""
        wait = self.store.commit_wait()
        if wait >= tool.timeout_s:
            call.shed = True
            self.metrics.calls_shed.labels(resource="evidence").inc()
        steps.admit_evidence(wait, tool)

    async def _finish(self, call: Call) -> ToolResult:
        secrets = call.context.secrets if call.context is not None else ()
        kept_input = recorded_input(call.input, secrets)
        result = call.result(kept_input)
        duration = time.perf_counter() - call.t0
        redact = self.redactor.value
        # Identity fields were validated on the server when the task was created; what the
        # caller or the handler supplied (name, input, output, errors, context) is redacted.
        identity, error = call.identity, call.error
        record = {
            "call_id": call.call_id,
            "kind": "call",
            "task_id": identity.task_id,
            "org_id": identity.org_id,
            "actor": identity.actor.id,
            "role": identity.actor.role,
            "tool": redact(call.tool_name[:128]),
            "door": call.door.value,
            "status": call.status.value,
            "error": redact(error.model_dump(exclude_none=True)) if error else None,
            "input": redact(kept_input),
            "output": redact(recorded_output(call.output)),
            "truncated": call.truncated,
            "replayed": call.replayed,
            "idempotency_key": redact(call.idempotency_key),
            "started_at": call.started,
            "duration_ms": round(duration * 1000, 3),
        }
        if call.context is not None and call.context.evidence:
            record["context"] = redact(call.context.evidence)
        if self.placement is not None and (call.epoch or call.lost_epoch) is not None:
            # Which node ran the side effect, and under which of the task's owner epochs.
            record["owner"] = {
                "node_id": self.placement.node_id,
                "epoch": call.epoch if call.epoch is not None else call.lost_epoch,
                "lost": call.lost_epoch is not None,
            }
        if call.routing:
            record["routed"] = True
        rows = [
            self.store.evidence_row(
                record_id=new_id("call") if call.routing else call.call_id,
                task_id=identity.task_id,
                org_id=identity.org_id,
                kind="call",
                record=record,
                tool=record["tool"],
                door=call.door.value,
                status=call.status.value,
                error_code=error.code if error else None,
                charged=call.charged,
                side_effect=call.side_effect,
            )
        ]
        if call.idempotency_row is not None:
            rows.append(call.idempotency_row)
        try:
            if call.shed:
                # Its record joins the queue and the answer does not wait for it: the call
                # did nothing, and waiting is what it was turned away from.
                self.store.enqueue(rows).add_done_callback(_unstored)
            elif call.epoch is None or self.placement is None:
                await self.store.commit(rows)
            else:
                guard, params = self.placement.commit_guard(identity.task_id, call.epoch)
                if not await self.store.commit_if(guard, params, rows):
                    # The task moved on while this ran: what it did is kept, as in doubt,
                    # and not as the call's result (a retry under its key is in doubt).
                    return await self._finish(lost_owner(call))
        except StorageError as exc:
            self.metrics.storage_failures.inc()
            result = ToolResult(
                call_id=call.call_id,
                tool=call.tool_name,
                status=ToolStatus.FAILED,
                error=exc.to_tool_error(),
            )
        known = self.registry.get(call.tool_name) is not None
        self.metrics.calls.labels(
            call.tool_name if known else "-", call.door.value, result.status.value
        ).inc()
        self.metrics.call_seconds.labels(call.door.value).observe(duration)
        return result

    def _running(self, task_id: str, handler: asyncio.Future[Any]) -> None:
        running = self._handlers.setdefault(task_id, set())
        running.add(handler)

        def done(_f: asyncio.Future[Any]) -> None:
            running.discard(handler)
            if not running and self._handlers.get(task_id) is running:
                del self._handlers[task_id]

        handler.add_done_callback(done)

    async def release(self, task_id: str) -> None:
        """Another node holds the task now: the handlers still running for it here are
        cancelled (a side effect under way is cut short; its record says in doubt)."""
        for handler in list(self._handlers.get(task_id, ())):
            handler.cancel()

    async def forget(self, task_id: str, _reason: str) -> None:
        """A task ended or expired: its calls are refused from now on, its usage can go."""
        self._usage.pop(task_id, None)

    async def _usage_of(self, task_id: str) -> TaskUsage:
        usage = self._usage.get(task_id)
        if usage is None:
            # After a restart the budget goes on from what the evidence says was spent.
            calls, side_effects = await self.store.usage(task_id)
            usage = self._usage.setdefault(task_id, TaskUsage(calls, side_effects))
        return usage

    def _started(self, identity: TaskIdentity) -> Callable[[asyncio.Future[Any]], None]:
        """What `run_handler` tells of a handler it starts: a node of a cluster keeps it,
        to cancel it when it loses the task."""

        def started(handler: asyncio.Future[Any]) -> None:
            if self.placement is not None:
                self._running(identity.task_id, handler)

        return started


def _unstored(done: asyncio.Future[None]) -> None:
    if not done.cancelled() and done.exception() is not None:
        log.warning("the record of a call turned away was not stored: %r", done.exception())
