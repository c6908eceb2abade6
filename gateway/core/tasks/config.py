"""What the task service is built from: one frozen object, made from `Settings` in
gateway/parts.py."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.tokens import Purpose


@dataclass(frozen=True, slots=True)
class TasksConfig:
    """How long a task and each of its tokens may live, and how many tasks an organization
    may hold at once."""

    tab_token_ttl_s: int = 900
    agent_token_ttl_s: int = 900
    bridge_token_ttl_s: int = 900
    # A task asking for more, or for no TTL, gets this.
    max_task_ttl_s: int = 3600
    # Live tasks of one organization at once; a create past it is refused.
    max_live_per_org: int = 100

    def token_ttl_s(self, purpose: Purpose) -> int:
        """The most a token of `purpose` may live (never past its task's end)."""
        return {
            Purpose.TAB: self.tab_token_ttl_s,
            Purpose.AGENT: self.agent_token_ttl_s,
            Purpose.BRIDGE: self.bridge_token_ttl_s,
        }[purpose]
