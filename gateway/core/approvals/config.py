"""What the approvals desk is built from: one frozen object, made from `Settings` in
gateway/parts.py."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ApprovalsConfig:
    """The desk's limit on what one task may have waiting for a person."""

    # Each request waiting is a row, evidence and a panel in the person's tab, and no
    # person answers dozens at once.
    max_pending_per_task: int = 16
