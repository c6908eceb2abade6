"""Approvals for clients with no back channel: the question as an `InputRequiredResult`.

A client of the 2026-07-28 protocol cannot be sent a request by the server; it is answered
with an `input_required` result instead, and retries the same call carrying its answers
and the result's `requestState`. For a call that waits for a person this door does that:

- the call runs on (parked here) while the client is away, waiting for its approval as
  any call waits, so the task's tab or control plane can still answer it;
- the first answer is an `InputRequiredResult` whose one input request is what an
  elicitation would have asked (a form for one call inside the grant, else a URL-mode
  link to the dashboard or the gateway's approval page: `gateway.mcp_door.elicitation`),
  and whose `requestState` is an
  unguessable handle;
- a retry is matched to its parked call by that handle, and only by the same task for the
  same tool and the same arguments (the approval itself is bound to the validated input's
  digest); a form answer goes to the approval desk as an elicited answer, so the desk's
  rules on what a form may decide apply; then the retry waits for the call's result (or
  the next question the call asks) and answers it.

A parked call whose client never comes back ends as any unanswered approval does
(expired); its result is kept a while for a late retry, then dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from gateway.core.approvals.channels import ApprovalPage, form_may_answer
from gateway.core.results import ToolResult
from gateway.mcp_door.elicitation import FORM, choice_of, link_for, message_of

INPUT_KEY = "approval"
# How long a finished parked call's result waits for its client's retry.
KEEP_RESULT_S = 120.0
# Parked calls one task may hold at once (each waits on a pending approval).
MAX_PARKED_PER_TASK = 32


class StaleState(Exception):
    """A retry's `requestState` names no parked call of this task, tool and arguments."""


def arguments_digest(name: str, arguments: Mapping[str, Any] | None) -> str:
    canonical = json.dumps(
        [name, arguments or {}], sort_keys=True, separators=(",", ":"), default=str
    )
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass
class Parked:
    """One call waiting for its client to come back with an answer."""

    task_id: str
    digest: str
    by_form: bool
    by_url: bool
    page: str
    # The gateway's approval page, for what only the control plane's party may answer.
    console: ApprovalPage | None = None
    # The running call (set once started) and how to tell it its client went away.
    call: asyncio.Future[ToolResult] | None = None
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    # The next question the call asks (set by `ask`), and the client's answer to it.
    asked: asyncio.Future[types.InputRequiredResult] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    answered: asyncio.Future[types.ElicitResult | None] | None = None
    handle: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    async def ask(self, request: Mapping[str, Any]) -> tuple[str, str] | None:
        """The call's `Elicit`: put the question to the client's next exchange."""
        question = self._question(request)
        if question is None:
            return None  # nothing the client may be asked: the other channels answer
        answered: asyncio.Future[types.ElicitResult | None] = (
            asyncio.get_running_loop().create_future()
        )
        self.answered = answered
        if self.asked.done():
            self.asked = asyncio.get_running_loop().create_future()
        self.asked.set_result(
            types.InputRequiredResult(
                input_requests={INPUT_KEY: question}, request_state=self.handle
            )
        )
        reply = await answered
        if reply is None or question.params.mode == "url":
            return None  # a link's reply decides nothing; the page does
        return choice_of(reply.action, reply.content)

    def _question(self, request: Mapping[str, Any]) -> types.ElicitRequest | None:
        if self.by_form and form_may_answer(request):
            return types.ElicitRequest(
                params=types.ElicitRequestFormParams(
                    message=message_of(request), requested_schema=FORM
                )
            )
        link = link_for(request, self.page, self.console) if self.by_url else None
        if link is not None:
            url, message = link
            return types.ElicitRequest(
                params=types.ElicitRequestURLParams(message=message, url=url)
            )
        return None

    def answer(self, responses: Mapping[str, Any] | None) -> None:
        """The retry's answer to the question last asked, if it carries one."""
        answered = self.answered
        if answered is None or answered.done():
            return
        reply = (responses or {}).get(INPUT_KEY)
        answered.set_result(reply if isinstance(reply, types.ElicitResult) else None)
        self.asked = asyncio.get_running_loop().create_future()

    async def next(self) -> ToolResult | types.InputRequiredResult:
        """The call's result, or the next question it asks, whichever comes first."""
        call, asked = self.call, self.asked
        assert call is not None
        waiting: list[asyncio.Future[Any]] = [call, asked]
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if call.done():
            return call.result()
        return asked.result()


class ParkedCalls:
    """The calls of this process waiting for their clients to retry."""

    def __init__(self, *, enabled: bool = True) -> None:
        # Off on a node of a cluster: a retry may reach another node, which holds nothing.
        self.enabled = enabled
        self._by_handle: dict[str, Parked] = {}

    def has_room(self, task_id: str) -> bool:
        """Whether this task may park one more call; if not, its client waits on the
        exchange for the other channels, as a client without elicitation does."""
        return self.enabled and self.held(task_id) < MAX_PARKED_PER_TASK

    def park(self, parked: Parked) -> None:
        self._by_handle[parked.handle] = parked
        assert parked.call is not None
        parked.call.add_done_callback(lambda _f: self._drop_later(parked.handle))

    def _drop_later(self, handle: str) -> None:
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().call_later(KEEP_RESULT_S, self._by_handle.pop, handle, None)

    def find(
        self, handle: str, task_id: str, name: str, arguments: Mapping[str, Any] | None
    ) -> Parked:
        parked = self._by_handle.get(handle)
        if (
            parked is None
            or parked.task_id != task_id
            or parked.digest != arguments_digest(name, arguments)
        ):
            raise StaleState("the requestState is unknown, expired, or for another call")
        return parked

    def done_with(self, parked: Parked) -> None:
        """The client has its result: nothing more to keep."""
        self._by_handle.pop(parked.handle, None)

    def held(self, task_id: str) -> int:
        return sum(1 for p in self._by_handle.values() if p.task_id == task_id)
