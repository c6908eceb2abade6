"""One protocol between the nodes of a cluster: an envelope sent to the node that owns its
task, run there once, and ended by that node's own sealed answer.

Two kinds of envelope travel it, each on a subject of its own (`subjects.py`): a routed
call (`gw.call.<node>`: a tool call the owner runs through its pipeline, answered with the
result) and an errand (`gw.errand.<node>`: anything else only the owner can do for a task,
such as a person's answer to an approval it waits on). A routed call is one kind of errand:
the same envelope rules (`envelope.py`), the same request, and the same failures told to
the sender, raised as two leaves of the error tree. `NodeUnavailable` (503): the owner was
not reached, refused the envelope, or the task is changing nodes, and nothing was done.
`NodeTimeout` (504): no answer in time, and it may have been done. Only replies that were
not the owner's by the deadline are `InDoubt` (502). What the owner itself raised comes
back as an `ErrandError` with the status and code it had there.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gateway.core.errors import GatewayError, InDoubt
from gateway.core.identity import TaskIdentity
from gateway.core.results import ErrorCode, ToolStatus

from .bus import Bus, BusError, BusTimeout, NoResponder
from .envelope import Envelopes
from .subjects import CALLS, ERRANDS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Kind:
    """One kind of envelope: its seal's purpose (and what a refusal calls it), its subject,
    the key of its id, the key its answer comes under, and what its sender is told when no
    answer came in time (unless an idempotency key says more)."""

    name: str
    subject: str
    id_key: str
    answer_key: str
    unanswered: str


CALL = Kind("call", CALLS, "call_id", "result", "the call may still take effect there")
ERRAND = Kind(
    "errand",
    ERRANDS,
    "id",
    "answer",
    "it may have done it: read the task's state before asking again",
)

# What the owner does for an envelope it took: given the task, its answer (JSON).
Job = Callable[[TaskIdentity], Awaitable[Any]]


class ErrandError(GatewayError):
    """An errand (a routed call is one) that failed: on the owner (relayed as it was raised
    there) or on its way."""

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        http_status: int | None = None,
        retryable: bool | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message, code=code, retryable=retryable, details=details)
        if http_status is not None:
            self.http_status = http_status


class NodeUnavailable(ErrandError):
    """The task's owner was not reached, or refused the envelope: nothing was done, and
    asking again (`details.retry_after_s`) reaches the node that holds the task."""

    code = ErrorCode.UNAVAILABLE
    http_status = 503
    tool_status = ToolStatus.UNAVAILABLE
    retryable = True


class NodeTimeout(ErrandError):
    """The task's owner did not answer in time: it may have done it."""

    code = ErrorCode.TIMEOUT
    http_status = 504
    tool_status = ToolStatus.TIMEOUT


def changing_nodes() -> NodeUnavailable:
    """Two owners in a row said they were not: the task is moving."""
    return NodeUnavailable(
        "the task is changing gateway nodes; nothing was done", details={"retry_after_s": 1}
    )


def relayed(error: Any) -> ErrandError:
    """The error another node answered with, raised here as it was raised there (only what
    an error may be: a status of 400 to 599, else 502)."""
    error = error if isinstance(error, dict) else {}
    status = error.get("http_status")
    details = error.get("details")
    code = error.get("code")
    return ErrandError(
        str(error.get("message", "another gateway node failed")),
        code=code if isinstance(code, str) else ErrorCode.HANDLER_ERROR,
        http_status=status if isinstance(status, int) and 400 <= status <= 599 else 502,
        retryable=error.get("retryable") is True,
        details=details if isinstance(details, dict) else None,
    )


class Rpc:
    """Sends envelopes to other nodes and serves the ones sent to this node. `gone_retry_s`:
    how long after an owner stops answering another has its tasks (its beats missed)."""

    def __init__(self, envelopes: Envelopes, bus: Bus, *, gone_retry_s: int) -> None:
        self.node_id = envelopes.node_id
        self.envelopes = envelopes
        self.bus = bus
        self._gone_retry_s = gone_retry_s

    async def request(
        self,
        kind: Kind,
        node: str,
        envelope: dict[str, Any],
        *,
        reply_age_s: float,
        keyed: bool = False,
    ) -> Any:
        """`node`'s answer to `envelope`, waited for `envelope["wait_s"]`; None when `node`
        does not hold the task (nothing was done). Replies older than `reply_age_s` are not
        taken; `keyed`: the envelope is a call under an idempotency key."""
        sent = self.envelopes.seal(kind.name, envelope)
        envelope_id = envelope[kind.id_key]

        def accept(reply: bytes) -> dict[str, Any] | None:
            return self.envelopes.answer(reply, node, kind.id_key, envelope_id, sent, reply_age_s)

        subject = kind.subject.format(node=node)
        try:
            answer = await self.bus.request(subject, sent, envelope["wait_s"], accept)
        except NoResponder:
            # A dead owner's questions died with it; the node that frees its tasks closes
            # them, which asking again then says.
            raise NodeUnavailable(
                f"the gateway node that holds this task ({node}) is not answering; another "
                "takes the task over within a few seconds; nothing was done",
                details={"retry_after_s": self._gone_retry_s},
            ) from None
        except BusTimeout as exc:
            if exc.refused:
                raise _in_doubt(node, kind, envelope_id, exc.refused, keyed) from None
            raise NodeTimeout(
                f"the gateway node that holds this task ({node}) did not answer in time; "
                + (
                    "a retry with the same idempotency key says whether the call took effect"
                    if keyed
                    else kind.unanswered
                ),
                retryable=keyed,
            ) from None
        except BusError as exc:
            raise NodeUnavailable(
                f"the gateway's cluster bus is unavailable ({exc}); nothing was done",
                details={"retry_after_s": 1},
            ) from None
        if answer.get("refused"):
            raise NodeUnavailable(
                f"node {node} refused the {kind.name}: {str(answer['refused'])[:200]}; "
                "nothing was done",
                details={"retry_after_s": 1},
            )
        if answer.get("not_owner"):
            return None
        if "error" in answer:
            raise relayed(answer["error"])
        return answer[kind.answer_key]

    async def serve(
        self,
        kind: Kind,
        data: bytes,
        job_for: Callable[[dict[str, Any]], Job],
        holder: Callable[[str], Awaitable[TaskIdentity | None]],
    ) -> bytes | None:
        """The sealed reply to an envelope sent to this node: `job_for` says what to do for
        it, `holder` whose task it is while this node holds it (None when it does not: the
        sender asks the ledger again and sends it elsewhere)."""
        envelope = self.envelopes.take(kind.name, data, kind.id_key)
        if not isinstance(envelope, dict):
            return envelope  # the refusal, or nothing for a copy of an envelope taken
        envelope_id, task_id = envelope[kind.id_key], envelope["task_id"]

        def reply(**value: Any) -> bytes:
            return self.envelopes.reply({kind.id_key: envelope_id, **value})

        try:
            job = job_for(envelope)
        except GatewayError as exc:
            return reply(error=_carried(exc))
        try:
            identity = await holder(task_id)
        except GatewayError as exc:
            self.envelopes.forget(envelope_id)
            return reply(refused=exc.message)
        if identity is None:
            self.envelopes.forget(envelope_id)  # nothing ran: the sender may send it again
            return reply(not_owner=True)
        try:
            answer = await job(identity)
        except GatewayError as exc:
            return reply(error=_carried(exc))
        except Exception:
            log.exception("cluster: a routed %s failed", kind.name)
            error = {
                "code": ErrorCode.HANDLER_ERROR,
                "message": f"the {kind.name} failed on node {self.node_id}",
                "retryable": False,
                "http_status": 500,
            }
            return reply(error=error)
        return reply(**{kind.answer_key: answer})


def _carried(exc: GatewayError) -> dict[str, Any]:
    """An error raised on the owner, as its answer carries it."""
    return {**exc.to_json()["error"], "http_status": exc.http_status}


def _in_doubt(node: str, kind: Kind, envelope_id: str, refused: int, keyed: bool) -> InDoubt:
    return InDoubt(
        f"gateway node {node} was sent this, and no answer from it could be verified before "
        f"the deadline ({refused} replies were not its own: forged, or the nodes do not "
        "share their keys); it may or may not have taken effect there, and it is not sent "
        "again" + ("; a call with the same idempotency key says what it did" if keyed else ""),
        details={"node_id": node, f"{kind.name}_id": envelope_id},
    )
