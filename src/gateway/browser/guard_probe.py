"""Before a Chromium serves any task: does it send loopback traffic through a context's proxy?

The origin guard is each context's proxy, and Chromium exempts loopback hosts from proxies
unless told otherwise: by `--proxy-bypass-list=<-loopback>` at launch, or by `<-loopback>`
in a context's own proxy rules, which Playwright 1.65 adds (unless
`PLAYWRIGHT_DISABLE_FORCED_CHROMIUM_PROXIED_LOOPBACK` is set; older ones did not). The pool
launches its own Chromium with the switch, but a remote Playwright server
(`GATEWAY_BROWSER_WS_ENDPOINT`) launches its own browser with its own Playwright, and
nothing else would notice one that goes around the proxy: a task's pages would then reach
every loopback port with no check at all. So each browser is asked once,
before its first task, to open a loopback URL in a context whose proxy allows nothing; the
proxy must see that request. A browser that does not send it there is never used.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

from playwright.async_api import Browser, BrowserContext
from playwright.async_api import Error as PlaywrightError

from .guard_proxy import BlockedRequest, OriginProxy

PROBE_PATH = "/gateway-guard-probe"
PROBE_TIMEOUT_MS = 10_000


class GuardBypassed(RuntimeError):
    """The browser reached loopback around its context's proxy."""


async def probe_guard(browser: Browser) -> None:
    """Raise `GuardBypassed` unless the browser's loopback traffic goes through the proxy."""
    seen = asyncio.Event()
    # A loopback port held but not listening: a browser going around the proxy is refused
    # there, and nothing else can take the port meanwhile. (Well-known idle ports such as
    # 9 are on Chromium's unsafe list: it would refuse those itself, proxy or not.)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{held.getsockname()[1]}{PROBE_PATH}"

        def blocked(request: BlockedRequest) -> None:
            if request.target == url:
                seen.set()

        proxy = OriginProxy(blocked)  # allows no origin: the probe is refused, not forwarded
        await proxy.start()
        context: BrowserContext | None = None
        try:
            context = await browser.new_context(proxy={"server": proxy.url})
            page = await context.new_page()
            # Refused with a 204, the navigation is aborted: an error here is the usual end.
            with contextlib.suppress(PlaywrightError):
                await page.goto(url, timeout=PROBE_TIMEOUT_MS, wait_until="commit")
        finally:
            if context is not None:
                with contextlib.suppress(PlaywrightError):
                    await context.close()
            await proxy.close()
    if not seen.is_set():
        raise GuardBypassed(
            "the browser does not send loopback traffic through the task's proxy, so the "
            "origin guard would not see it; launch Chromium with "
            "--proxy-bypass-list=<-loopback> (and "
            "--force-webrtc-ip-handling-policy=disable_non_proxied_udp)"
        )
