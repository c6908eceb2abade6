"""Chromium's launch arguments: Chromium applies only the last switch of each feature kind,
so the gateway's switches must carry Playwright's features along."""

from __future__ import annotations

from gateway.browser.chromium import (
    PLAYWRIGHT_DISABLED_FEATURES,
    PLAYWRIGHT_ENABLED_FEATURES,
    dropped_features,
    launch_args,
)


def _switches(args: list[str], prefix: str) -> list[list[str]]:
    return [a.split("=", 1)[1].split(",") for a in args if a.startswith(prefix)]


def test_one_switch_of_each_kind_carrying_playwrights_features() -> None:
    args = launch_args(
        webmcp=True,
        extra=("--disable-features=Foo", "--marker=x", "--enable-features=Bar"),
        disable_features=("RenderDocument",),
    )
    [enabled] = _switches(args, "--enable-features=")
    [disabled] = _switches(args, "--disable-features=")
    assert enabled == [*PLAYWRIGHT_ENABLED_FEATURES, "WebMCP", "Bar"]
    assert disabled == [*PLAYWRIGHT_DISABLED_FEATURES, "RenderDocument", "Foo"]
    assert "--marker=x" in args


def test_no_feature_switch_unless_one_is_asked_for() -> None:
    # Without one, Playwright's own switches are the last of their kind and apply as they are.
    assert not [a for a in launch_args() if "-features=" in a]


def test_a_launch_command_line_as_playwright_builds_it_loses_nothing() -> None:
    playwright_first = [
        "--disable-features=" + ",".join(PLAYWRIGHT_DISABLED_FEATURES),
        "--enable-features=" + ",".join(PLAYWRIGHT_ENABLED_FEATURES),
    ]
    ours = launch_args(webmcp=True, disable_features=("RenderDocument",))
    assert dropped_features([*playwright_first, *ours]) == {}


def test_what_a_later_switch_would_drop_is_named() -> None:
    line = ["--disable-features=A,B", "--enable-features=X", "--disable-features=B,C"]
    assert dropped_features(line) == {"--disable-features=": ["A"]}
    assert dropped_features(["--enable-features=X,Y", "--enable-features=Y"]) == {
        "--enable-features=": ["X"]
    }
