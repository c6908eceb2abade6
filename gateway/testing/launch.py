"""How pytest-playwright launches Chromium under the gateway's plugin (registered by it
after pytest-playwright, so this fixture wraps that one's)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.browser.chromium import find_chromium, launch_args


@pytest.fixture(scope="session")
def browser_type_launch_args(
    browser_type_launch_args: dict[str, Any], browser_name: str
) -> dict[str, Any]:
    """Chromium with WebMCP on; where no channel was asked for, the Chromium the gateway
    finds (Playwright's own, else the machine's), which its task browser uses too."""
    options = dict(browser_type_launch_args)
    if browser_name != "chromium":
        return options
    if "channel" not in options and "executable_path" not in options:
        options["executable_path"] = find_chromium()
    options["args"] = [*launch_args(webmcp=True), *options.get("args", [])]
    return options
