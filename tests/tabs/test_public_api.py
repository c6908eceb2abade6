"""The tab channel's public names: what host apps and tool handlers import."""

from __future__ import annotations

import gateway.tabs


def test_public_api_is_explicit() -> None:
    assert sorted(gateway.tabs.__all__) == [
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
    for name in gateway.tabs.__all__:
        assert getattr(gateway.tabs, name) is not None
