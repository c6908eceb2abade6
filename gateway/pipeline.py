"""The call pipeline: the one path every tool call takes, whichever door it came in by.

resolve -> authorize -> budget -> validate -> idempotency -> approval -> run under a
deadline -> bound the output -> persist evidence -> exactly one terminal `ToolResult`.

Authorization has three answers: the task's grant covers the call; it does not, and the
task's approval policy lets a person grant it (or the policy requires a person for this
tool), so the call waits for an approval (`gateway.approvals`); or it stays `denied`.

A catalog entry is never authority: the identity is authorized again on every call, and
the task's stored state (ended, expired) is read again too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from gateway.approval_policy import Approver, Need
from gateway.approvals.broker import Approvals, default_summary
from gateway.errors import GatewayError, StorageError, ToolFailure
from gateway.evidence_log import EventLog
from gateway.identity import TaskIdentity
from gateway.ids import new_id
from gateway.metrics import Metrics
from gateway.ports import Elicit, Placement
from gateway.recording import (
    declared_secrets,
    input_digest,
    masked,
    recorded_input,
    recorded_output,
)
from gateway.redaction import Redactor
from gateway.registry import ProgressFn, Registry, Services, Tool, ToolContext
from gateway.results import Door, ErrorCode, ToolError, ToolResult, ToolStatus
from gateway.store.database import Store
from gateway.tasks import TaskService, TaskStatus

log = logging.getLogger(__name__)

MAX_INPUT_BYTES = 256 * 1024


@dataclass
class _KeyLock:
    lock: asyncio.Lock
    holders: int = 0


@dataclass
class _Call:
    """The state of one call on its way to its terminal result."""

    identity: TaskIdentity
    tool_name: str
    door: Door
    call_id: str
    idempotency_key: str | None
    input: Any
    started: float = field(default_factory=time.time)
    t0: float = field(default_factory=time.perf_counter)
    status: ToolStatus = ToolStatus.SUCCEEDED
    output: Any = None
    error: ToolError | None = None
    truncated: bool = False
    replayed: bool = False
    charged: bool = False  # counted against the task's call budget
    side_effect: bool = False  # counted against its side-effect budget
    context: ToolContext | None = None
    idempotency_row: tuple[Any, dict[str, Any]] | None = None
    shed: bool = False  # turned away before it ran: the evidence writer is too far behind
    epoch: int | None = None  # the owner epoch its side effect ran under (a cluster)
    # The owner epoch its side effect ran under when its node lost the task meanwhile.
    lost_epoch: int | None = None
    # Sent to the task's owner on another node: a failure of that hop is this node's own
    # record, under an id of its own (the owner may still record the call under its id).
    routing: bool = False

    def result(self, recorded_input: Any = None) -> ToolResult:
        return ToolResult(
            call_id=self.call_id,
            tool=self.tool_name,
            status=self.status,
            output=self.output,
            error=self.error,
            truncated=self.truncated,
            replayed=self.replayed,
            recorded_input=recorded_input,
        )


@dataclass
class _TaskUsage:
    calls: int = 0
    side_effects: int = 0


class _Pause:
    """Time a call's handler spends waiting for a person, which its deadline does not count."""

    __slots__ = ("_active", "_resumed", "_since", "total")

    def __init__(self) -> None:
        self._active = 0
        self._since = 0.0
        self.total = 0.0  # seconds paused so far, on the loop's clock
        self._resumed: asyncio.Event | None = None

    def begin(self) -> None:
        if self._active == 0:
            self._since = asyncio.get_running_loop().time()
            self.resumed.clear()
        self._active += 1

    def end(self) -> None:
        self._active -= 1
        if self._active == 0:
            self.total += asyncio.get_running_loop().time() - self._since
            self.resumed.set()

    def paused_for(self, now: float) -> float:
        """Seconds paused so far, the pause under way included."""
        return self.total + (now - self._since if self._active else 0.0)

    def counts(self) -> bool:
        """Whether the deadline is paused now (a person is being asked), or was moved."""
        return self._active > 0

    @property
    def resumed(self) -> asyncio.Event:
        if self._resumed is None:
            self._resumed = asyncio.Event()
        return self._resumed


@dataclass
class _Asking:
    """How one call reaches its caller while it runs: progress, cancel, elicitation."""

    progress: ProgressFn | None
    cancel: asyncio.Event | None
    elicit: Elicit | None
    routed: bool = False  # sent here by another node: it runs here
    pause: _Pause = field(default_factory=_Pause)


def _secret_values(call: _Call) -> list[str]:
    """The values of the call's secret input fields, kept out of what a person is shown
    (a handler's own summary may quote its input)."""
    fields = call.context.secrets if call.context is not None else set()
    if not isinstance(call.input, dict):
        return []
    found: list[str] = []
    # A secret field may hold others (a form's fields): every text below it is secret.
    pending = [v for k, v in call.input.items() if k in fields]
    while pending:
        value = pending.pop()
        if isinstance(value, str) and value:
            found.append(value)
        elif isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return found


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value


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
        self._usage: dict[str, _TaskUsage] = {}
        # Set when this gateway is a node of a cluster: calls run on their task's owner.
        self.placement: Placement | None = None
        # Handlers running, by task: a node that loses a task cancels them.
        self._handlers: dict[str, set[asyncio.Future[Any]]] = {}
        # One lock per (task, tool, idempotency key), dropped when no call holds or awaits it.
        self._key_locks: dict[tuple[str, str, str], _KeyLock] = {}

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
        if not (tool_name.isascii() and tool_name.isprintable()):
            # No registered name is non-ASCII or holds a control character, so this one is
            # unknown; a lone surrogate (not UTF-8) or a NUL (not PostgreSQL text) in it could
            # be neither stored as evidence nor answered, so those are kept escaped.
            tool_name = "".join(
                c if c.isprintable() else c.encode("unicode_escape").decode() for c in tool_name
            )
        tool = self.registry.get(tool_name)
        if tool is not None:
            # Called by its id or by its exposed name: evidence and results name the id.
            tool_name = tool.name
        asking = _Asking(progress, cancel, elicit, routed)
        if tool is None or not tool.side_effects or not idempotency_key:
            return await self._call(
                identity, tool_name, raw_input, door, idempotency_key, asking, call_id
            )
        # Calls under one idempotency key run one at a time, and the lock is held until the
        # first one's record is committed: a concurrent replay then finds it in the store.
        key = (identity.task_id, tool.name, idempotency_key)
        entry = self._key_locks.setdefault(key, _KeyLock(asyncio.Lock()))
        entry.holders += 1
        try:
            async with entry.lock:
                return await self._call(
                    identity, tool_name, raw_input, door, idempotency_key, asking, call_id
                )
        finally:
            entry.holders -= 1
            if entry.holders == 0:
                del self._key_locks[key]

    async def _call(
        self,
        identity: TaskIdentity,
        tool_name: str,
        raw_input: Any,
        door: Door,
        idempotency_key: str | None,
        asking: _Asking,
        call_id: str,
    ) -> ToolResult:
        call = _Call(identity, tool_name, door, call_id, idempotency_key, raw_input)
        progress, cancel = asking.progress, asking.cancel
        tool = self.registry.get(tool_name)
        try:
            if tool is None:
                raise ToolFailure(
                    ToolStatus.DENIED,
                    ErrorCode.UNKNOWN_TOOL,
                    f"no tool named {tool_name[:128]!r} is available to this task",
                )
            await self._check_task(identity)
            need = self._authorize(identity, tool)
            if self.placement is not None and not asking.routed:
                # The checks above need nothing of the task's owner; the rest runs there.
                call.routing = True
                answer = await self.placement.elsewhere(
                    identity,
                    tool.name,
                    raw_input,
                    door=door,
                    idempotency_key=idempotency_key,
                    call_id=call_id,
                    timeout_s=tool.timeout_s,
                )
                if answer is not None:
                    return answer
                call.routing = False
            self._admit_evidence(call, tool)
            usage = await self._usage_of(identity.task_id)
            self._charge_budget(identity, tool, usage)
            call.charged = True
            args = self._validate(tool, raw_input)
            call.input = args.model_dump(mode="json")
            call.context = ToolContext(
                identity=identity,
                call_id=call_id,
                tool=tool,
                door=door,
                services=self.services,
                progress=progress,
                asker=self._asker(call, asking) if self.approvals is not None else None,
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
                    await self._approve(call, tool, need, digest, asking)
                if self.placement is not None and tool.side_effects:
                    call.epoch = await self.placement.fence(
                        identity, tool.name, idempotency_key if keyed else None, call_id
                    )
                call.side_effect = tool.side_effects
                usage.side_effects += int(tool.side_effects)
                call.output, call.truncated = await self._run(
                    tool, call.context, args, cancel, asking
                )
                if keyed and idempotency_key is not None:
                    # Committed with the call's evidence, in one transaction, before the
                    # result is returned: after a crash a replay finds it, or the call
                    # was never answered.
                    call.idempotency_row = self.store.idempotency_row(
                        identity.task_id,
                        tool.name,
                        idempotency_key,
                        call_id,
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

    def _admit_evidence(self, call: _Call, tool: Tool) -> None:
        """Turn the call away before it runs when its record could not be committed before
        its deadline: the evidence writer is that far behind (a database locked or slow).
        Uncharged, and retryable once the queue has drained."""
        wait = self.store.commit_wait()
        if wait < tool.timeout_s:
            return
        call.shed = True
        self.metrics.calls_shed.labels(resource="evidence").inc()
        raise ToolFailure(
            ToolStatus.UNAVAILABLE,
            ErrorCode.OVERLOADED,
            f"the evidence store is behind: a record would wait about {wait:.1f} s to be "
            f"stored, past this call's deadline of {tool.timeout_s:g} s; nothing was done",
            retryable=True,
            details={"retry_after_s": max(1, math.ceil(wait))},
        )

    def _authorize(self, identity: TaskIdentity, tool: Tool) -> Need | None:
        """None when the grant covers the call; a `Need` when it waits for a person."""
        missing, other = tool.shortfall(identity)
        policy = identity.approvals
        need = None
        if self.approvals is not None and (policy.required or policy.grantable):
            need = tool.approval(identity)
        if need is None and (missing or other):
            raise ToolFailure(
                ToolStatus.DENIED, ErrorCode.FORBIDDEN, f"this task may not call {tool.name!r}"
            )
        return need

    async def _approve(
        self, call: _Call, tool: Tool, need: Need, digest: str, asking: _Asking
    ) -> None:
        """Wait for a person, unless one already granted this need (the gate in front of
        this tool, for the party the policy names) for the whole task."""
        assert self.approvals is not None
        assert call.context is not None
        grant = await self.approvals.granted(call.identity.task_id, tool.name, need)
        if grant is not None:
            call.context.evidence["approval"] = {"granted_for_task": grant["approval_id"]}
            call.context.approved_by = dict(grant["by"])
            return
        # What a person reads never holds what evidence would not keep.
        shown = masked(call.input, call.context.secrets)
        summary = (
            tool.approval_summary(shown)
            if tool.approval_summary is not None
            else default_summary(tool.title, tool.name, shown)
        )
        request = await self.approvals.ask(
            call.identity,
            policy=call.identity.approvals,
            need=need,
            call_id=call.call_id,
            tool=tool.name,
            door=call.door,
            input_digest=digest,
            summary=summary,
            cancel=asking.cancel,
            progress=asking.progress,
            elicit=asking.elicit,
            secret_values=_secret_values(call),
        )
        call.context.evidence["approval"] = {"approval_id": request.id}
        if request.decision is not None:
            call.context.approved_by = request.decision.public()["approver"]

    def _asker(
        self, call: _Call, asking: _Asking
    ) -> Callable[[str, dict[str, Any] | None, Approver], Awaitable[None]]:
        """`ctx.request_approval` of this call: asks as the pipeline would, and the time a
        person takes does not count against the tool's deadline."""
        approvals = self.approvals
        assert approvals is not None

        async def ask(summary: str, details: dict[str, Any] | None, by: Approver) -> None:
            identity = call.identity
            need = Need(by, "the tool asks")
            # Approved for the task, this ask is not asked again (the gate before the tool
            # was passed on its own terms).
            grant = await approvals.granted(identity.task_id, call.tool_name, need)
            if grant is not None:
                if call.context is not None:
                    granted = call.context.evidence.setdefault("asks_granted_for_task", [])
                    granted.append(grant["approval_id"])
                return
            digest = input_digest(call.input)
            asking.pause.begin()
            try:
                request = await approvals.ask(
                    identity,
                    policy=identity.approvals,
                    need=need,
                    call_id=call.call_id,
                    tool=call.tool_name,
                    door=call.door,
                    input_digest=digest,
                    summary=summary,
                    details=details,
                    cancel=asking.cancel,
                    progress=asking.progress,
                    elicit=asking.elicit,
                    secret_values=_secret_values(call),
                )
            finally:
                asking.pause.end()
            if call.context is not None:
                call.context.evidence.setdefault("approvals", []).append(request.id)

        return ask

    async def _check_task(self, identity: TaskIdentity) -> None:
        record = await self.tasks.record(identity.task_id)
        if record is None or record.revoked_at is not None:
            raise ToolFailure(ToolStatus.DENIED, ErrorCode.REVOKED, "the task has ended")
        if self.tasks.status_of(record) is TaskStatus.EXPIRED:
            raise ToolFailure(ToolStatus.DENIED, ErrorCode.INVALID_TOKEN, "the task has expired")

    @staticmethod
    def _charge_budget(identity: TaskIdentity, tool: Tool, usage: _TaskUsage) -> None:
        budget = identity.budget
        if budget.max_calls is not None and usage.calls >= budget.max_calls:
            raise ToolFailure(
                ToolStatus.DENIED,
                ErrorCode.BUDGET_EXCEEDED,
                f"the task's budget of {budget.max_calls} calls is spent",
            )
        if (
            tool.side_effects
            and budget.max_side_effects is not None
            and usage.side_effects >= budget.max_side_effects
        ):
            raise ToolFailure(
                ToolStatus.DENIED,
                ErrorCode.BUDGET_EXCEEDED,
                f"the task's budget of {budget.max_side_effects} side effects is spent",
            )
        usage.calls += 1

    @staticmethod
    def _validate(tool: Tool, raw_input: Any) -> BaseModel:
        if raw_input is None:
            raw_input = {}
        if not isinstance(raw_input, Mapping):
            raise ToolFailure(
                ToolStatus.FAILED, ErrorCode.INVALID_INPUT, "tool input must be a JSON object"
            )
        try:
            size = len(json.dumps(raw_input, separators=(",", ":")))
        except (TypeError, ValueError, RecursionError) as exc:
            raise ToolFailure(
                ToolStatus.FAILED, ErrorCode.INVALID_INPUT, "tool input is not plain JSON"
            ) from exc
        if size > MAX_INPUT_BYTES:
            raise ToolFailure(
                ToolStatus.FAILED,
                ErrorCode.INVALID_INPUT,
                f"tool input is {size} bytes; at most {MAX_INPUT_BYTES}",
            )
        try:
            return tool.input_model.model_validate(raw_input)
        except ValidationError as exc:
            errors = [
                {"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]}
                for e in exc.errors(include_url=False, include_input=False)
            ]
            raise ToolFailure(
                ToolStatus.FAILED,
                ErrorCode.INVALID_INPUT,
                f"input does not match {tool.name}'s schema",
                details={"errors": errors},
            ) from None

    async def _run(
        self,
        tool: Tool,
        context: ToolContext,
        args: BaseModel,
        cancel: asyncio.Event | None,
        asking: _Asking,
    ) -> tuple[Any, bool]:
        pause = asking.pause
        loop = asyncio.get_running_loop()
        deadline = loop.time() + tool.timeout_s
        # What the handler sees of its deadline (a browser action is not started without
        # time to finish it): the same clock and pauses as the wait below.
        context.remaining = lambda: deadline + pause.paused_for(loop.time()) - loop.time()
        handler = asyncio.ensure_future(tool.handler(context, args))
        if self.placement is not None:
            self._running(context.identity.task_id, handler)
        waiter = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
        try:
            while True:
                done, _ = await asyncio.wait(
                    [handler] if waiter is None else [handler, waiter],
                    timeout=max(0.0, deadline + pause.total - loop.time()),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if done:
                    break
                if not pause.counts():
                    if loop.time() >= deadline + pause.total:
                        break
                    continue  # a person answered while it waited: the deadline moved
                # The handler waits for a person: its deadline resumes once they answer.
                resumed = asyncio.ensure_future(pause.resumed.wait())
                try:
                    done, _ = await asyncio.wait(
                        [handler, resumed] if waiter is None else [handler, waiter, resumed],
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    resumed.cancel()
                if handler in done or (waiter is not None and waiter in done):
                    break
        except asyncio.CancelledError:
            handler.cancel()
            raise
        finally:
            if waiter is not None:
                waiter.cancel()
        if handler not in done:
            handler.cancel()
            # The outcome is decided already; the handler only has to be gone.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await handler
            if waiter is not None and waiter in done:
                raise ToolFailure(ToolStatus.FAILED, ErrorCode.CANCELLED, "the call was cancelled")
            raise ToolFailure(
                ToolStatus.TIMEOUT,
                ErrorCode.TIMEOUT,
                f"{tool.name} did not finish within {tool.timeout_s:g} s",
                retryable=True,
            )
        try:
            value = _jsonable(handler.result())
        except GatewayError:
            raise
        except asyncio.CancelledError as exc:
            raise ToolFailure(
                ToolStatus.FAILED, ErrorCode.CANCELLED, "the handler was cancelled"
            ) from exc
        except Exception as exc:
            log.warning("tool %s failed: %r", tool.name, exc)
            raise ToolFailure(
                ToolStatus.FAILED,
                ErrorCode.HANDLER_ERROR,
                f"{tool.name} failed: {type(exc).__name__}",
            ) from exc
        return bound_output(value, tool.max_output_bytes)

    async def _finish(self, call: _Call) -> ToolResult:
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
                    return await self._finish(_lost_owner(call))
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

    async def _usage_of(self, task_id: str) -> _TaskUsage:
        usage = self._usage.get(task_id)
        if usage is None:
            # After a restart the budget goes on from what the evidence says was spent.
            calls, side_effects = await self.store.usage(task_id)
            usage = self._usage.setdefault(task_id, _TaskUsage(calls, side_effects))
        return usage

    async def record_event(
        self, identity: TaskIdentity, kind: str, data: Mapping[str, Any]
    ) -> str | None:
        """Evidence that is not a call: a rejected frame, a blocked navigation..."""
        return await self.events.record(identity, kind, data)


def _lost_owner(call: _Call) -> _Call:
    """A side effect whose node lost the task while it ran (another node owns it now, or
    the task ended): it is recorded as in doubt, not as its result, under no idempotency
    key (a retry under the key is told `in_doubt`, never run again by itself)."""
    call.error = ToolError(
        code=ErrorCode.IN_DOUBT,
        message="this gateway node lost the task while the call ran; whether it took "
        "effect is not known",
        details={"epoch": call.epoch},
    )
    call.status = ToolStatus.UNAVAILABLE
    call.output = None
    call.idempotency_row = None
    call.lost_epoch, call.epoch = call.epoch, None
    return call


def _unstored(done: asyncio.Future[None]) -> None:
    if not done.cancelled() and done.exception() is not None:
        log.warning("the record of a call turned away was not stored: %r", done.exception())


def bound_output(value: Any, limit: int) -> tuple[Any, bool]:
    """The output if its JSON fits in `limit` bytes; else a flagged, cut rendering."""
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError) as exc:
        raise ToolFailure(
            ToolStatus.FAILED, ErrorCode.HANDLER_ERROR, "the tool returned a value that is not JSON"
        ) from exc
    encoded = text.encode()
    if len(encoded) <= limit:
        return value, False
    if isinstance(value, str):
        return value.encode()[:limit].decode(errors="ignore"), True
    return {
        "truncated_json": encoded[:limit].decode(errors="ignore"),
        "original_bytes": len(encoded),
    }, True
