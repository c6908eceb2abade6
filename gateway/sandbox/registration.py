"""What every provider checks of a task's spec against the operator's registration.

The repository must be registered, the environment's names allowed by its registration,
and the limits within the gateway's maximum (a task asking for more is refused, not cut).
One author for these rules, whatever backend then runs the app.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.core.sandbox_spec import Limits, Provision, Repository

from .errors import SandboxRefused


def check(
    spec: Provision, repositories: Mapping[str, Repository], max_limits: Limits
) -> tuple[Repository, Limits]:
    """The registration the spec names and its limits with the maximum filled in; raises
    `SandboxRefused` (422) naming the field otherwise."""
    repository = repositories.get(spec.repository)
    if repository is None:
        raise SandboxRefused(
            f"no repository {spec.repository!r} is registered for sandboxes",
            field="repository",
        )
    unlisted = sorted(set(spec.env) - set(repository.env))
    if unlisted:
        raise SandboxRefused(
            f"the repository's registration does not allow the variables {unlisted}",
            field="env",
            names=unlisted,
        )
    limits, over = spec.limits.within(max_limits)
    if over:
        raise SandboxRefused(
            f"limits above the gateway's maximum: {over}",
            field="limits",
            names=over,
            maximum=max_limits.model_dump(),
        )
    return repository, limits
