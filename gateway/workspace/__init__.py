"""Per-task workspaces and the canonical `workspace.*` tools over them."""

from gateway.workspace.ids import CANONICAL_WORKSPACE_IDS, OutwardIdMap
from gateway.workspace.paths import Workspace, workspace_dir
from gateway.workspace.tools import WORKSPACE_TOOLS, Workspaces, install, register

__all__ = [
    "CANONICAL_WORKSPACE_IDS",
    "WORKSPACE_TOOLS",
    "OutwardIdMap",
    "Workspace",
    "Workspaces",
    "install",
    "register",
    "workspace_dir",
]
