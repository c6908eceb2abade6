"""What a task asks of its sandbox, and what an operator registers for it to be given.

- `Provision` is the `sandbox.provision` object of `POST /v1/tasks`: a provider, a
  repository *name*, a commit, the environment the app gets, whether its data is kept, and
  limits. It names no path and no URL: where the repository is and how its app starts are
  the operator's (`Repository`, from `GATEWAY_SANDBOX_REPOSITORIES`), never a model's or
  the repository's own.
- `Limits` are what one sandbox may use. A task may ask for less than the gateway's
  maximum, never more (`Limits.within`).

Models only: `gateway.core.identity` stores a task's `Provision` with its sandbox, so this module
imports nothing of the gateway.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

# A registered repository's or a provider's name, as a task names it.
RegisteredName = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
]
# A commit as hexadecimal only (7 to 40 digits): never a range or an option, so git cannot
# read it as anything else. git reads a shorter one as a ref name first, so what resolves
# must start with what was asked (`checkout.resolve_commit`), or it is refused.
Commit = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{7,40}$")]
EnvName = Annotated[
    str, StringConstraints(min_length=1, max_length=64, pattern=r"^[A-Z_][A-Z0-9_]{0,63}$")
]
MAX_ENV = 32
MAX_ENV_VALUE = 4096


class Limits(BaseModel):
    """What one sandbox may use; None: the gateway's maximum.

    Each is enforced as a resource limit on every process of the sandbox (address space,
    CPU seconds and file size per process; processes for the sandbox's own user), and as
    the sandbox's cgroup's total where a delegated cgroup v2 hierarchy exists
    (docs/sandbox.md). Without one, `memory_mb` bounds no process's memory but its own
    address space: the manifest's `not_enforced` says so.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory_mb: int | None = Field(default=None, ge=32, le=1 << 20)
    processes: int | None = Field(default=None, ge=1, le=1 << 16)
    cpu_s: int | None = Field(default=None, ge=1, le=1 << 24)
    file_size_mb: int | None = Field(default=None, ge=1, le=1 << 20)
    open_files: int | None = Field(default=None, ge=16, le=1 << 20)

    def within(self, maximum: Limits) -> tuple[Limits, list[str]]:
        """These limits with the gateway's maximum filled in, and the names of those asked
        above it (a task asking for more than the gateway allows is refused, not cut)."""
        over: list[str] = []
        values: dict[str, int | None] = {}
        for name in type(self).model_fields:
            asked, cap = getattr(self, name), getattr(maximum, name)
            if asked is not None and cap is not None and asked > cap:
                over.append(name)
            values[name] = asked if asked is not None else cap
        return Limits(**values), over


DEFAULT_MAX_LIMITS = Limits(
    memory_mb=1024, processes=64, cpu_s=900, file_size_mb=256, open_files=1024
)


class Provision(BaseModel):
    """`sandbox.provision` of `POST /v1/tasks`: the app to run for this task."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: RegisteredName = "local"
    repository: RegisteredName
    commit: Commit
    # Given to the app as its whole environment, with the sandbox's own few variables
    # (docs/sandbox.md); each name must be one the repository's registration allows.
    # Recorded with the task: not a place for secrets.
    env: dict[EnvName, Annotated[str, StringConstraints(max_length=MAX_ENV_VALUE)]] = Field(
        default_factory=dict
    )
    # Keep the app's data directory as an artifact of the task when it is torn down.
    keep_data: bool = False
    limits: Limits = Limits()

    @field_validator("env")
    @classmethod
    def _env_size(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_ENV:
            raise ValueError(f"at most {MAX_ENV} environment variables")
        for name, text in value.items():
            if "\0" in text:
                raise ValueError(f"the value of {name} holds a NUL byte")
        return value


class Repository(BaseModel):
    """One repository an operator registers (`GATEWAY_SANDBOX_REPOSITORIES`, by name).

    `command` is the app's argv, run in the checkout. `{python}` in it is the gateway's own
    interpreter, whose installation is then visible read-only in the sandbox. The app is
    handed a listening unix socket as file descriptor `SANDBOX_LISTEN_FD` (0, its standard
    input) and answers HTTP there; `health_path` must answer 2xx once it is ready.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(min_length=1)
    command: tuple[str, ...] = Field(min_length=1)
    health_path: str = Field(default="/", pattern=r"^/[A-Za-z0-9._~/?=&%-]*$", max_length=256)
    # Environment variables a task may give the app (names, exactly).
    env: tuple[EnvName, ...] = ()
    # Further host paths the app may read (a runtime it needs), bound read-only.
    read_only: tuple[str, ...] = ()
    ready_timeout_s: float = Field(default=30.0, gt=0, le=600)

    @field_validator("path", "read_only")
    @classmethod
    def _absolute(cls, value: str | tuple[str, ...]) -> str | tuple[str, ...]:
        for path in (value,) if isinstance(value, str) else value:
            if not path.startswith("/"):
                raise ValueError(f"{path!r} is not an absolute path")
        return value


MIB = 1024 * 1024


class Budgets(BaseModel):
    """What one sandbox's files may take of the gateway's machine, whatever its limits say
    (`GATEWAY_SANDBOX_BUDGETS`, JSON, docs/sandbox.md).

    - `checkout_bytes`, `checkout_files`: any object of a registered repository can be
      asked for by its hex id (even an unreachable one), so a checkout's size is the
      task's choice, written to the gateway's disk: refused past these, before a byte is
      written. Bytes count file contents, files count every entry.
    - `data_bytes`, `data_entries`: the size and number of files and folders of the
      tmpfs mounted as the app's data folder. No resource limit bounds a folder's total,
      and a walk of one misses what is unlinked but held open: the kernel holds a tmpfs
      to its size (a write past it fails with ENOSPC). Its pages are memory (swappable),
      which no resource limit counts either: this is also what a sandbox's data may take
      of the machine's memory.
    - `tmp_bytes`: the size of the tmpfs /tmp (its entries: `data_entries`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    checkout_bytes: int = Field(default=256 * MIB, ge=1)
    checkout_files: int = Field(default=50_000, ge=1)
    data_bytes: int = Field(default=512 * MIB, ge=1)
    data_entries: int = Field(default=100_000, ge=1)
    tmp_bytes: int = Field(default=64 * MIB, ge=1)


DEFAULT_BUDGETS = Budgets()


class IncusBackend(BaseModel):
    """Where the `incus` provider makes its containers (`GATEWAY_SANDBOX_INCUS`, JSON,
    docs/sandbox.md). Unset, the gateway has no `incus` provider.

    - `socket`: Incus's unix socket on this machine; or `url` with `client_cert`,
      `client_key` (paths of a certificate Incus trusts) and `server_cert` (the server's
      certificate or CA) for an Incus, or a member of an Incus cluster, elsewhere.
    - `project`, `pool`, `profile`, `image`: what the containers are made in and from; the
      provider creates the pool (`dir`), the profile and the image when they are missing.
    - `prefix`: of every container's name; with `deployment` it tells this gateway's
      containers (all of its nodes') from anyone else's on the same Incus.
    - `warm`: blank containers each gateway process keeps started and ready (no task's,
      never used twice), so a task's sandbox waits only for its checkout and its app.
    - `socket_dir`: where each app's socket appears on this machine (every node of a
      cluster on one machine must see the same folder); default
      `/run/gateway-incus/<deployment>`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    socket: str = "/var/lib/incus/unix.socket"
    url: str | None = Field(default=None, pattern=r"^https://")
    client_cert: str | None = None
    client_key: str | None = None
    server_cert: str | None = None
    project: RegisteredName = "default"
    pool: RegisteredName = "gateway"
    profile: RegisteredName = "gateway-sandbox"
    image: RegisteredName = "gateway-sandbox"
    prefix: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{0,15}$")] = "gw-"
    deployment: RegisteredName = "gateway"
    socket_dir: str | None = None
    # Started blank containers kept ready, so a task waits only for its own app.
    warm: int = Field(default=1, ge=0, le=64)
