"""What a person granted for the rest of a task: by tool, under the need it answers.

A grant is written in the same transaction as the decision that gives it (its row beside
the approval's), and read back here, cached per task for the calls that ask whether they
are granted. A decision that grants reads the store itself, not the cache: the task may
have had another owner since the cache was filled, and the first grant of a need stands.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.core.approval_policy import Need
from gateway.core.approvals.request import ApprovalRequest
from gateway.core.store.database import Store

Grants = dict[str, dict[str, Any]]


class TaskGrants:
    """The tasks' grants, as the store holds them, cached per task."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: dict[str, Grants] = {}
        # One "for this task" answer at a time: whether the need is granted already is read
        # and the grant written in one turn, so two answers never both write it.
        self.granting = asyncio.Lock()

    async def _of(self, task_id: str) -> Grants:
        grants = self._cache.get(task_id)
        if grants is None:
            grants = self._cache[task_id] = await self.store.task_grants(task_id)
        return grants

    async def granted(self, task_id: str, tool: str, need: Need) -> dict[str, Any] | None:
        """What a person granted for the rest of the task that answers exactly this need of
        this tool, if anything: filed under the need, and given for the party it names (a
        grant of the tool's own ask never opens the gate in front of the tool, an actor's
        grant never a control need)."""
        grant = (await self._of(task_id)).get(need.grant_key(tool))
        if grant is None or grant.get("need") != need.public():
            return None
        return grant

    async def _all(self, task_id: str) -> Grants:
        cached = self._cache.get(task_id)
        return dict(cached) if cached is not None else await self.store.task_grants(task_id)

    async def grants(self, task_id: str) -> Grants:
        """The tools granted for the rest of the task (the gate in front of each), by id."""
        return {k: v for k, v in (await self._all(task_id)).items() if "/" not in k}

    async def granted_asks(self, task_id: str) -> list[dict[str, Any]]:
        """The tools' own asks granted for the rest of the task: each tool still passes
        its gate as its grant says, and only the ask is not asked again."""
        return [
            {"tool": key.split("/", 1)[0], **grant}
            for key, grant in (await self._all(task_id)).items()
            if "/" in key
        ]

    async def grant_for(
        self, request: ApprovalRequest, approver: Any, at: float
    ) -> tuple[Grants, dict[str, Any] | None]:
        """What the task holds now, read from the store, and the grant an approval of
        `request` for the rest of the task adds (None: granted already, by an answer to
        another of the task's requests; this one approves its own call and the first
        grant stands). Held under `granting`."""
        held = await self.store.task_grants(request.task_id)
        if request.need.grant_key(request.tool) in held:
            return held, None
        grant = {
            "approval_id": request.id,
            "by": approver,
            "at": at,
            "need": request.need.public(),
        }
        return held, grant

    def granted_now(
        self, request: ApprovalRequest, held: Grants, grant: dict[str, Any] | None
    ) -> None:
        """The decision that read `held` is stored, with `grant` if it added one."""
        key = request.need.grant_key(request.tool)
        self._cache[request.task_id] = {**held, **({key: grant} if grant is not None else {})}

    def task_ids(self) -> set[str]:
        """Tasks whose grants are cached."""
        return set(self._cache)

    def forget(self, task_id: str) -> None:
        self._cache.pop(task_id, None)
