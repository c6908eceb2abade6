"""The dashboard tab channel: a per-task request/reply channel to the user's tab, carrying
only allowlisted UI actions, and the tab's own tool calls (WebMCP or its assistant panel).

Public API for a host app and its tool handlers:

- `Views`: `gw.services.get(Views).register(name, ParamsModel, title)`.
- `TabHub`: `await ctx.service(TabHub).send(ctx.identity, action, timeout_s=...)` ->
  `TabOutcome` (`.ok`, `.status`, `.result`, `.error`, `.unwrap()`).
- The actions: `OpenView`, `PopulateDraft`, `ShowRunProgress`, `DisplayProposedChange`,
  `ReadView` (or `hub.action("open_view", {...})` to build one from plain data).
- `install(gw)`: the extension (WS /v1/tabs, GET /webmcp.js, the `ui.*` tools).
"""

from gateway.tabs.actions import (
    DisplayProposedChange,
    DraftFields,
    OpenView,
    PopulateDraft,
    ReadView,
    ShowRunProgress,
    UIAction,
)
from gateway.tabs.channel import TabChannel
from gateway.tabs.config import TabConfig
from gateway.tabs.extension import install
from gateway.tabs.hub import TabHub
from gateway.tabs.limits import ChannelLimits
from gateway.tabs.outcome import TabOutcome
from gateway.tabs.views import Views

__all__ = [
    "ChannelLimits",
    "DisplayProposedChange",
    "DraftFields",
    "OpenView",
    "PopulateDraft",
    "ReadView",
    "ShowRunProgress",
    "TabChannel",
    "TabConfig",
    "TabHub",
    "TabOutcome",
    "UIAction",
    "Views",
    "install",
]
