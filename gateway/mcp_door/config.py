"""What the MCP door is built from: one frozen object, made from `Settings` in
gateway/parts.py (so it imports no door code, and nothing above settings)."""

from __future__ import annotations

from dataclasses import dataclass

# Larger images are not inlined as MCP image blocks.
MAX_IMAGE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class McpDoorConfig:
    """The door's limits, and whether it answers as a node of a cluster."""

    # On a cluster's node: no sessions, no parked calls, no call tasks.
    clustered: bool = False
    image_blocks: bool = True
    max_image_bytes: int = MAX_IMAGE_BYTES
    max_body_bytes: int = 1024 * 1024
    session_idle_s: float = 1800.0
    max_sessions_per_task: int = 16
