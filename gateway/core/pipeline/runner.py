"""The `Pipeline`: runs one call through the steps to exactly one recorded terminal result."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Unpack

from gateway.core.approval_policy import Need
from gateway.core.approvals.broker import Approvals
from gateway.core.errors import GatewayError, StorageError, ToolFailure
from gateway.core.evidence import EventLog
from gateway.core.identity import TaskIdentity
from gateway.core.ids import new_id
from gateway.core.metrics import Metrics
from gateway.core.ports import NO_FENCING, CallOptions, Fenced, Fencing
from gateway.core.recording import declared_secrets, input_digest, recorded_input, recorded_output
from gateway.core.redaction import Redactor
from gateway.core.registry import Registry, Services, Tool, ToolContext
from gateway.core.results import Door, ErrorCode, ToolError, ToolResult, ToolStatus
from gateway.core.store.database import Store
from gateway.core.tasks.service import TaskService

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
        fencing: Fencing = NO_FENCING,
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
        # What fences a side effect to its task's owner (a cluster's node); on a single
        # gateway, nothing.
        self.fencing = fencing
        self._keys = KeyLocks()

    async def call(
        self,
        identity: TaskIdentity,
        tool_name: str,
        raw_input: Any,
        *,
        door: Door,
        **options: Unpack[CallOptions],
    ) -> ToolResult:
        """Run one call to its terminal result. Never raises for a call-level failure.

        `elicit`, from a door that can ask the person at the agent's client, is one more
        channel for the approvals this call may need."""
        call_id = options.get("call_id") or new_id("call")
        idempotency_key = options.get("idempotency_key")
        tool_name = steps.printable_name(tool_name)
        tool = self.registry.get(tool_name)
        if tool is not None:
            # Called by its id or by its exposed name: evidence and results name the id.
            tool_name = tool.name
        asking = Asking(options.get("progress"), options.get("cancel"), options.get("elicit"))
        # Calls under one idempotency key run one at a time, and the lock is held until the
        # first one's record is committed: a concurrent replay then finds it in the store.
        async with self._keys.holding(identity.task_id, tool, idempotency_key):
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
        fenced: Fenced | None = None
        try:
            tool, need = await self._checked(identity, tool_name)
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
                if tool.side_effects:
                    fenced = await self.fencing.fence(
                        identity, tool.name, idempotency_key if keyed else None, call.call_id
                    )
                call.side_effect = tool.side_effects
                usage.side_effects += int(tool.side_effects)
                task_id = identity.task_id
                value = await run_handler(
                    tool,
                    call.context,
                    args,
                    asking.cancel,
                    asking.pause,
                    lambda handler: self.fencing.running(task_id, handler),
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
            call.status, call.output, call.error = ToolStatus.FAILED, None, _cancelled()
            await asyncio.shield(self._finish(call, fenced))
            raise
        return await self._finish(call, fenced)

    async def checked(self, identity: TaskIdentity, tool_name: str) -> Tool:
        """The tool, when the checks that need nothing of the task's owner let its call on
        (a known tool, a live task, a permitted call); raises the call's failure otherwise."""
        tool, _need = await self._checked(identity, steps.printable_name(tool_name))
        return tool

    async def _checked(self, identity: TaskIdentity, tool_name: str) -> tuple[Tool, Need | None]:
        tool = steps.known(self.registry.get(tool_name), tool_name)
        record = await self.tasks.record(identity.task_id)
        steps.check_task(record, self.tasks.status_of(record) if record else None)
        return tool, steps.authorize(identity, tool, self.approvals is not None)

    async def unsent(
        self,
        identity: TaskIdentity,
        tool_name: str,
        raw_input: Any,
        *,
        door: Door,
        idempotency_key: str | None,
        call_id: str,
        failure: GatewayError | None,
    ) -> ToolResult:
        """Record a call that was passed on to run elsewhere (its task's owner) and failed
        on the way, or whose caller went away meanwhile (`failure` None). It is this
        gateway's own record, marked `routed`, under an id of its own: where it went may
        still record the call under its id."""
        call = Call(
            identity, steps.printable_name(tool_name), door, call_id, idempotency_key, raw_input
        )
        if failure is None:
            call.status, call.error = ToolStatus.FAILED, _cancelled()
        else:
            call.status, call.error = failure.tool_status, failure.to_tool_error()
        return await self._finish(call, routed=True)

    def _admit_evidence(self, call: Call, tool: Tool) -> None:
        """A call the evidence writer is too far behind for is shed: its record then does
        not wait, and `steps.admit_evidence` turns it away."""
        wait = self.store.commit_wait()
        if wait >= tool.timeout_s:
            call.shed = True
            self.metrics.calls_shed.labels(resource="evidence").inc()
        steps.admit_evidence(wait, tool)

    async def _finish(
        self, call: Call, fenced: Fenced | None = None, *, lost: bool = False, routed: bool = False
    ) -> ToolResult:
        """Record the call and answer it. `fenced`: its side effect's fence, which its record
        names and its commit holds under (`lost`: the fence did not hold, so what it did is
        recorded as in doubt). `routed`: a failed hop to where it was to run."""
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
        if fenced is not None:
            # Which node ran the side effect, and under which of the task's owner epochs.
            record["owner"] = {"node_id": fenced.node_id, "epoch": fenced.epoch, "lost": lost}
        if routed:
            record["routed"] = True
        rows = [
            self.store.evidence_row(
                record_id=new_id("call") if routed else call.call_id,
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
            elif fenced is None or lost:
                await self.store.commit(rows)
            else:
                guard, params = fenced.guard
                if not await self.store.commit_if(guard, params, rows):
                    # The task moved on while this ran: what it did is kept, as in doubt,
                    # and not as the call's result (a retry under its key is in doubt).
                    return await self._finish(lost_owner(call, fenced.epoch), fenced, lost=True)
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


def _cancelled() -> ToolError:
    return ToolError(code=ErrorCode.CANCELLED, message="the caller cancelled the call")


def _unstored(done: asyncio.Future[None]) -> None:
    if not done.cancelled() and done.exception() is not None:
        log.warning("the record of a call turned away was not stored: %r", done.exception())
