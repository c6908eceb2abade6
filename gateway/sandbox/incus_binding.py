"""What a container's own config says of its sandbox, so any node can take it over.

A started blank is made a task's in one change (`bind`: its limits, its checkout, and the
binding). A node writes the task it is bound to, the spec, the manifest and the app's exec operation
into the container's config (`user.gateway.*`), and reads them back into a handle
(`from_config`) when the task moves to it. Teardown is claimed there too, with a
compare-and-set on the container's ETag, so of several nodes ending one task exactly one
archives its data and deletes it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from gateway.core.sandbox_spec import Limits, Provision, Repository

from .incus_api import Incus, IncusError
from .incus_blanks import KEY, config_time, read_only, runtime_paths
from .incus_sandbox import IncusSandbox
from .provider import Binding

log = logging.getLogger(__name__)

# A teardown claimed this long ago and not done is a dead process's: another takes it over.
CLAIM_STALE_S = 120.0


def binding_config(handle: IncusSandbox, deployment: str, commit: str) -> dict[str, str]:
    """The keys that bind a container to its task, as `from_config` reads them."""
    b = handle.binding
    return {
        f"{KEY}deployment": deployment,
        f"{KEY}sandbox": handle.sandbox_id,
        f"{KEY}task": b.task_id,
        f"{KEY}org": b.org_id,
        f"{KEY}actor": b.actor_id,
        f"{KEY}expires": b.expires_at.isoformat(),
        f"{KEY}spec": handle.spec.model_dump_json(),
        f"{KEY}limits": handle.limits.model_dump_json(),
        f"{KEY}commit": commit,
        f"{KEY}origin": handle.origin,
        f"{KEY}folder": str(handle.folder),
        f"{KEY}socket": str(handle.socket_path),
        f"{KEY}bound": f"{time.time():.0f}",
    }


async def bind(
    incus: Incus, handle: IncusSandbox, repository: Repository, commit: str, deployment: str
) -> None:
    """Make a started blank the task's: its limits, its checkout, its socket, and the
    binding any node reads it back from, in one change (devices are hot-plugged)."""
    limits = handle.limits
    found, etag = await incus.instance(handle.name)
    config = dict(found.get("config") or {})
    config.pop(f"{KEY}blank", None)
    for blank_limit in ("limits.processes", "limits.memory"):
        config.pop(blank_limit, None)
    if limits.memory_mb is not None:
        config["limits.memory"] = f"{limits.memory_mb}MiB"
        config["limits.memory.swap"] = "false"
    if limits.processes is not None:
        config["limits.processes"] = str(limits.processes + 1)  # and the container's init
    config.update(binding_config(handle, deployment, commit))
    devices = dict(found.get("devices") or {})
    devices["app"] = {**read_only(str(handle.checkout)), "path": "/app"}
    for index, path in enumerate(runtime_paths(repository.read_only)):
        devices[f"runtime{index}"] = read_only(path)
    await incus.replace_instance(
        handle.name, {**found, "config": config, "devices": devices}, etag=etag
    )


async def remember(incus: Incus, handle: IncusSandbox, **values: Any) -> None:
    """Write what another node needs to take this sandbox over into its config."""
    found, etag = await incus.instance(handle.name)
    config = dict(found.get("config") or {})
    for name, value in values.items():
        config[f"{KEY}{name}"] = value if isinstance(value, str) else json.dumps(value)
    await incus.patch_instance(handle.name, {"config": config}, etag=etag)


def from_config(
    instance: dict[str, Any], deployment: str, socket_of: Callable[[str], Path]
) -> IncusSandbox | None:
    """The handle of a container of `deployment` bound to a task; None for a blank, one
    being torn down, another deployment's, or one whose binding cannot be read."""
    config = instance.get("config") or {}
    if config.get(f"{KEY}deployment") != deployment:
        return None
    if f"{KEY}blank" in config:
        return None  # no task's yet
    _holder, _, since = str(config.get(f"{KEY}teardown", "")).partition("@")
    if since and time.time() - config_time(since) < CLAIM_STALE_S:
        return None  # being torn down (a claim older than that is a dead process's)
    try:
        binding = Binding(
            task_id=config[f"{KEY}task"],
            org_id=config[f"{KEY}org"],
            actor_id=config[f"{KEY}actor"],
            expires_at=datetime.fromisoformat(config[f"{KEY}expires"]),
        )
        sandbox_id = config[f"{KEY}sandbox"]
        folder, socket_path = Path(config[f"{KEY}folder"]), Path(config[f"{KEY}socket"])
        # Paths this process removes at teardown: only ever a sandbox's own.
        if (
            socket_path != socket_of(instance["name"])
            or folder.name != sandbox_id
            or folder.parent.name != "incus"
            or not folder.is_absolute()
            or ".." in folder.parts
        ):
            raise ValueError(f"its paths are not a sandbox's: {folder}, {socket_path}")
        handle = IncusSandbox(
            sandbox_id=sandbox_id,
            name=instance["name"],
            origin=config[f"{KEY}origin"],
            binding=binding,
            spec=Provision.model_validate_json(config[f"{KEY}spec"]),
            limits=Limits.model_validate_json(config[f"{KEY}limits"]),
            folder=folder,
            socket_path=socket_path,
        )
        handle.manifest = json.loads(config.get(f"{KEY}manifest", "{}"))
        handle.exec_id = config.get(f"{KEY}exec")
        handle.bound_at = config_time(config.get(f"{KEY}bound", ""))
        handle.restarts = int(config.get(f"{KEY}restarts", "0"))
    except (KeyError, ValueError) as exc:
        log.warning("container %s has no readable binding: %s", instance.get("name"), exc)
        return None
    return handle


async def claim(incus: Incus, handle: IncusSandbox, claimant: str) -> bool:
    """Mark the container as torn down by `claimant`; False when another one holds that
    mark. A mark older than `CLAIM_STALE_S` is a process that died mid-teardown: it is
    taken over."""
    while True:
        found, etag = await incus.instance(handle.name)
        config = dict(found.get("config") or {})
        holder, _, since = str(config.get(f"{KEY}teardown", "")).partition("@")
        if holder == claimant:
            return True
        if holder and time.time() - config_time(since) < CLAIM_STALE_S:
            return False
        config[f"{KEY}teardown"] = f"{claimant}@{time.time():.0f}"
        try:
            await incus.patch_instance(handle.name, {"config": config}, etag=etag)
        except IncusError as exc:
            if exc.conflict:
                continue  # changed meanwhile: read it again
            raise
        return True
