"""The control plane's task service: create tasks, authenticate their tokens, end them.

A task's identity is captured here, from the control plane's request, and stored. Token
verification returns that stored identity, never anything the caller sent. Ending a task
is one durable revocation row; every token of the task fails from then on, across
restarts. Other parts (tab channels, browsers) subscribe to task ends to release what
they hold for it. An organization holds at most `max_live_per_org` live tasks at once
(`gateway/core/tasks/quota.py`); a create past it is refused before anything is stored.

A task whose request asks for a sandbox to be provisioned (`sandbox.provision`) gets it
from the `provisioner` before it is stored: its app origin is the sandbox's, a failed
provisioning fails the create, and a create that fails after it tears the sandbox down.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from prometheus_client import Counter
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.core.approval_policy import ApprovalPolicy
from gateway.core.errors import AuthError, InvalidInput, NotFound, TokenExpired, TokenRevoked
from gateway.core.identity import Actor, Budget, Name, Sandbox, Scope, TaskIdentity, ToolPattern
from gateway.core.storage_state import StorageState, StorageStates
from gateway.core.store.database import Store
from gateway.core.store.tasks import TaskRecord
from gateway.core.tasks.config import TasksConfig
from gateway.core.tasks.quota import LiveTaskQuota
from gateway.core.tokens import Purpose, TokenClaims, TokenService

log = logging.getLogger(__name__)

EndListener = Callable[[str, str], Awaitable[None]]

# What `TaskService.create` makes a task id of: `task_` and 12 random bytes in hex. The shim
# checks a dashboard's task id hint against it (gateway/tabs/rules.py) before putting it in
# a URL.
TASK_ID_PATTERN = r"^task_[0-9a-f]{24}$"


class TaskStatus(StrEnum):
    """A task's state, as `GET /v1/tasks/{id}` says it."""

    ACTIVE = "active"
    ENDED = "ended"
    EXPIRED = "expired"


class TaskCreate(BaseModel):
    """Body of `POST /v1/tasks`."""

    model_config = ConfigDict(extra="forbid")

    actor: Actor
    org_id: Name
    sandbox: Sandbox
    scopes: list[Scope] = Field(default_factory=list, max_length=256)
    allowed_tools: list[ToolPattern] | None = Field(default=None, max_length=1024)
    budget: Budget = Budget()
    approvals: ApprovalPolicy = ApprovalPolicy()
    ttl_s: int | None = Field(default=None, ge=1)
    # A video of the task browser's pages, kept as an artifact when its context closes.
    record_video: bool = False
    # Cookies and local storage for the task's browser (gateway/core/storage_state.py): held in
    # memory for the task's life, never stored with its identity.
    storage_state: StorageState | None = None

    @model_validator(mode="after")
    def _state_within_origins(self) -> TaskCreate:
        if self.storage_state is not None:
            # A provisioned sandbox's origin is the gateway's to choose: only the allowed
            # origins named here can be signed in to ahead of it.
            wrong = self.storage_state.outside(self.sandbox.origins - {""})
            if wrong:
                raise ValueError(
                    "storage_state names what the task may not reach: " + "; ".join(wrong[:5])
                )
        return self

    @model_validator(mode="before")
    @classmethod
    def _one_origin_author(cls, data: Any) -> Any:
        # The gateway names a provisioned sandbox's origin; a caller naming one too would
        # leave two authors of the rule of where the task's browser may go.
        sandbox = data.get("sandbox") if isinstance(data, dict) else None
        if isinstance(sandbox, dict) and "provision" in sandbox and "app_origin" in sandbox:
            raise ValueError(
                "sandbox.app_origin is chosen by the gateway for a provisioned sandbox; "
                "leave it out"
            )
        if isinstance(sandbox, Sandbox) and sandbox.provision and sandbox.app_origin:
            raise ValueError("a sandbox to provision has no app_origin")
        return data


class ProvisionedApp(Protocol):
    """A task's app, provisioned before the task is stored (gateway/sandbox)."""

    origin: str

    async def bind(self, identity: TaskIdentity) -> None:
        """The task is stored: from now on the app is the task's (its manifest is recorded)."""
        ...

    async def discard(self) -> None:
        """The task was not stored: tear the app down."""
        ...


class AppProvisioner(Protocol):
    async def provision(
        self, task_id: str, request: TaskCreate, expires_at: datetime
    ) -> ProvisionedApp: ...


class TaskService:
    def __init__(
        self,
        store: Store,
        tokens: TokenService,
        config: TasksConfig,
        *,
        clock: Callable[[], float] = time.time,
        auth_failures: Counter | None = None,
    ) -> None:
        self.store = store
        self.tokens = tokens
        self.config = config
        self._max_ttl = config.max_task_ttl_s
        self._clock = clock
        # Every refused token is counted here, whichever door presented it.
        self._auth_failures = auth_failures
        # Verified identities by task id. A task's identity never changes; its revocation
        # is written here in the same step as in the store, so a hit is as good as a read.
        self._cache: dict[str, TaskRecord] = {}
        self._end_listeners: list[EndListener] = []
        self._expired: set[str] = set()  # expiries already announced to listeners
        self._forget_after_s = 3600.0
        self._quota = LiveTaskQuota(store, config.max_live_per_org)
        # Provisions a task's app when its request asks for one (gateway/sandbox sets it).
        self.provisioner: AppProvisioner | None = None
        # Where signed-in tasks' storage states are held (the task browser sets it).
        self.storage_states: StorageStates | None = None
        # How an end is made durable: the store's revocation row, unless a cluster ends a
        # task its own way (the row and the owner's fence in one transaction).
        self._revoke: Callable[[str, float, str], Awaitable[bool]] = lambda task_id, _at, reason: (
            store.revoke_task(task_id, reason)
        )

    def revoke_with(self, revoke: Callable[[str, float, str], Awaitable[bool]]) -> None:
        """End tasks durably with `revoke(task_id, at, reason)` instead of the store's."""
        self._revoke = revoke

    async def load(self) -> None:
        """Warm the cache with the tasks that are still live (after a restart)."""
        for record in await self.store.live_tasks(self._clock()):
            self._cache[record.identity.task_id] = record

    def live_ids(self) -> list[str]:
        """Tasks this process knows that have not ended (expired ones included)."""
        return [t for t, r in self._cache.items() if r.revoked_at is None]

    def ended_ids(self) -> set[str]:
        """Tasks this process knows that have ended."""
        return {t for t, r in self._cache.items() if r.revoked_at is not None}

    def active_count(self) -> int:
        now = self._clock()
        return sum(
            1
            for r in self._cache.values()
            if r.revoked_at is None and now < r.identity.expires_at.timestamp()
        )

    async def sweep(self) -> list[str]:
        """Tell listeners about tasks that expired since the last sweep; forget stale ones.

        An expired task ends like an ended one for everything that holds resources for it
        (tab channels, browser contexts). Entries are dropped from the cache once no token
        of theirs can verify any more; a later lookup reads the store again.
        """
        now = self._clock()
        newly_expired = []
        for task_id, record in list(self._cache.items()):
            expires = record.identity.expires_at.timestamp()
            if record.revoked_at is None and now >= expires and task_id not in self._expired:
                self._expired.add(task_id)
                newly_expired.append(task_id)
            if now >= expires + self._forget_after_s:
                del self._cache[task_id]
                self._expired.discard(task_id)
        for task_id in newly_expired:
            await self._notify_end(task_id, "expired")
        return newly_expired

    def on_end(self, listener: EndListener) -> Callable[[], None]:
        """Call `listener(task_id, reason)` when a task ends or expires; returns the undo."""
        self._end_listeners.append(listener)
        return lambda: self._end_listeners.remove(listener)

    async def create(self, request: TaskCreate) -> tuple[TaskIdentity, dict[str, str]]:
        if request.storage_state is not None and self.storage_states is None:
            raise InvalidInput("this gateway has no task browser to give a storage state to")
        now = datetime.fromtimestamp(int(self._clock()), UTC)
        ttl = min(request.ttl_s or self._max_ttl, self._max_ttl)
        task_id = f"task_{secrets.token_hex(12)}"
        expires_at = now + timedelta(seconds=ttl)
        app: ProvisionedApp | None = None
        if request.sandbox.provision is not None:
            if self.provisioner is None:
                raise InvalidInput(
                    "this gateway provisions no sandboxes (a node of a cluster does not)"
                )
            # A look first (refused as the insert would be): no sandbox is started for a
            # task that has no room.
            async with self._quota.admit(request.org_id, self._clock()):
                pass
            # Outside the organization's slot check, which other creates wait on; the slot
            # is checked again, for real, when the task is stored.
            app = await self.provisioner.provision(task_id, request, expires_at)
            # The origin is the provider's, made of its own id: already in normal form.
            sandbox = request.sandbox.model_copy(update={"app_origin": app.origin})
        else:
            sandbox = request.sandbox
        try:
            identity = TaskIdentity(
                task_id=task_id,
                actor=request.actor,
                org_id=request.org_id,
                sandbox=sandbox,
                scopes=frozenset(request.scopes),
                allowed_tools=tuple(request.allowed_tools)
                if request.allowed_tools is not None
                else None,
                budget=request.budget,
                approvals=request.approvals,
                record_video=request.record_video,
                created_at=now,
                expires_at=expires_at,
            )
            async with self._quota.admit(identity.org_id, self._clock()):
                await self._insert(identity)
            if request.storage_state is not None and self.storage_states is not None:
                self.storage_states.put(task_id, request.storage_state)
        except BaseException:
            if app is not None:
                await asyncio.shield(app.discard())
            raise
        if app is not None:
            await app.bind(identity)
        return identity, self.mint_all(identity)

    async def _insert(self, identity: TaskIdentity) -> None:
        insert = asyncio.ensure_future(self.store.insert_task(identity))
        try:
            await asyncio.shield(insert)
        except asyncio.CancelledError:
            # The row may still be committed after its caller gave up. Wait for it while
            # the organization's slot check is still held, so the next count sees it.
            await asyncio.wait({insert})
            raise
        self._cache[identity.task_id] = TaskRecord(identity, None, None)

    def mint_all(self, identity: TaskIdentity) -> dict[str, str]:
        return {purpose.value: self.mint(identity, purpose) for purpose in Purpose}

    def mint(self, identity: TaskIdentity, purpose: Purpose) -> str:
        remaining = identity.expires_at.timestamp() - self._clock()
        token, _ = self.tokens.mint(
            identity.task_id, purpose, min(self.config.token_ttl_s(purpose), remaining)
        )
        return token

    async def record(self, task_id: str) -> TaskRecord | None:
        cached = self._cache.get(task_id)
        if cached is not None:
            return cached
        record = await self.store.get_task(task_id)
        if record is not None:
            self._cache[task_id] = record
        return record

    def claims(self, token: str, purpose: Purpose) -> TokenClaims:
        """The token's own claims (signature, purpose, age), whatever its task's state."""
        return self.tokens.verify(token, purpose)

    async def authenticate(self, token: str, purpose: Purpose) -> TaskIdentity:
        """Verify a token for one purpose and return the task's stored identity."""
        identity, _ = await self.authenticate_claims(token, purpose)
        return identity

    async def authenticate_claims(
        self, token: str, purpose: Purpose
    ) -> tuple[TaskIdentity, TokenClaims]:
        try:
            return await self._authenticate(token, purpose)
        except AuthError as exc:
            if self._auth_failures is not None:
                self._auth_failures.labels(purpose.value, str(exc.code)).inc()
            raise

    async def _authenticate(self, token: str, purpose: Purpose) -> tuple[TaskIdentity, TokenClaims]:
        claims = self.tokens.verify(token, purpose)
        record = await self.record(claims.task_id)
        if record is None:
            raise AuthError("token names no known task")
        if record.revoked_at is not None:
            raise TokenRevoked()
        if self._clock() >= record.identity.expires_at.timestamp():
            raise TokenExpired("the task has expired")
        return record.identity, claims

    def status_of(self, record: TaskRecord) -> TaskStatus:
        if record.revoked_at is not None:
            return TaskStatus.ENDED
        if self._clock() >= record.identity.expires_at.timestamp():
            return TaskStatus.EXPIRED
        return TaskStatus.ACTIVE

    async def get(self, task_id: str) -> TaskRecord:
        record = await self.record(task_id)
        if record is None:
            raise NotFound("no such task")
        return record

    async def end(self, task_id: str, reason: str = "ended by the control plane") -> bool:
        """End a task: revoke its tokens durably, then tell every listener. Idempotent."""
        record = await self.get(task_id)
        changed = await self._revoke(task_id, self._clock(), reason)
        if changed or record.revoked_at is None:
            self._cache[task_id] = TaskRecord(record.identity, self._clock(), reason)
        if changed:
            await self._notify_end(task_id, reason)
        return changed

    async def ended_elsewhere(self, task_id: str, at: float, reason: str) -> bool:
        """Another process ended the task (its end is committed): refuse its tokens here
        too and tell this process's listeners. False when it was known ended already."""
        record = self._cache.get(task_id)
        if record is None:
            # Unknown here: nothing is held for it, and a later lookup reads the store.
            return False
        if record.revoked_at is not None:
            return False
        self._cache[task_id] = TaskRecord(record.identity, at, reason)
        await self._notify_end(task_id, reason)
        return True

    async def _notify_end(self, task_id: str, reason: str) -> None:
        results = await asyncio.gather(
            *(listener(task_id, reason) for listener in self._end_listeners),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                log.error("a task-end listener failed for %s: %r", task_id, result)

    def describe(self, record: TaskRecord) -> dict[str, Any]:
        identity = record.identity
        return {
            "task_id": identity.task_id,
            "status": self.status_of(record),
            "org_id": identity.org_id,
            "actor": identity.actor.model_dump(),
            "sandbox": identity.sandbox.model_dump(mode="json"),
            "scopes": sorted(identity.scopes),
            "allowed_tools": list(identity.allowed_tools)
            if identity.allowed_tools is not None
            else None,
            "budget": identity.budget.model_dump(exclude_none=True),
            "approvals": identity.approvals.model_dump(mode="json"),
            "record_video": identity.record_video,
            "created_at": identity.created_at.isoformat(),
            "expires_at": identity.expires_at.isoformat(),
            "ended_at": (
                datetime.fromtimestamp(record.revoked_at, UTC).isoformat()
                if record.revoked_at is not None
                else None
            ),
        }
