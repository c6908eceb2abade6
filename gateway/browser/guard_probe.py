"""Before a Chromium serves any task: can its pages reach anything but the guard?

Two questions, asked once per browser before its first task, from a page of a context
whose guard allows nothing:

1. Does a loopback HTTP request go through the context's proxy? Chromium exempts loopback
   hosts from proxies unless told otherwise (`--proxy-bypass-list=<-loopback>`, or
   `<-loopback>` in the context's proxy rules, which Playwright 1.65 adds). A jailed
   browser's proxy is its jail's guard socket, so the request also proves the browser is
   inside a jail that reported to this gateway: a remote browser is used only from there.
2. Does a WebRTC STUN request reach a UDP listener on the gateway's loopback? UDP never
   goes through a proxy; only the jail's network namespace stops it.

A browser that fails either is never used.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

from playwright.async_api import Browser, BrowserContext, Page
from playwright.async_api import Error as PlaywrightError

from .guards import BlockedRequest
from .jail import BrowserJail, open_guard

PROBE_PATH = "/gateway-guard-probe"
PROBE_TIMEOUT_MS = 10_000
# How long the UDP listener waits for a STUN request once the page started gathering (a
# leaking browser's first one arrived within 7 ms of the page starting, over 5 tries here).
UDP_GRACE_S = 0.2

# Starts gathering candidates against a STUN server; a browser that can send UDP there
# sends its first binding request at once. The connection is left open for the listener's
# grace period (the probe's context is closed after it).
_STUN_ATTEMPT = """async (server) => {
  const pc = new RTCPeerConnection({iceServers: [{urls: server}]});
  pc.createDataChannel("probe");
  await pc.setLocalDescription(await pc.createOffer());
  window.__gatewayProbe = pc;
}"""


class GuardBypassed(RuntimeError):
    """The browser reached something around its context's guard."""


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.received = 0

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.received += 1


async def probe_guard(browser: Browser, jail: BrowserJail | None, pid: int | None) -> None:
    """Raise `GuardBypassed` unless HTTP goes through the guard and UDP goes nowhere."""
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

        # A guard that allows no origin: the probe is refused, not forwarded.
        proxy = await open_guard(jail, pid, blocked)
        context: BrowserContext | None = None
        try:
            context = await browser.new_context(proxy={"server": proxy.url})
            page = await context.new_page()
            # Refused with a 204, the navigation is aborted: an error here is the usual end.
            with contextlib.suppress(PlaywrightError):
                await page.goto(url, timeout=PROBE_TIMEOUT_MS, wait_until="commit")
            if not seen.is_set():
                raise GuardBypassed(
                    "the browser does not send its requests through the task's guard"
                    + (
                        " socket in the gateway's network jail (a remote browser must run in it)"
                        if jail is not None
                        else "; launch Chromium with --proxy-bypass-list=<-loopback>"
                    )
                )
            if jail is not None:
                await _udp_stays_in(page)
        finally:
            if context is not None:
                with contextlib.suppress(PlaywrightError):
                    await context.close()
            await proxy.close()


async def _udp_stays_in(page: Page) -> None:
    loop = asyncio.get_running_loop()
    transport, listener = await loop.create_datagram_endpoint(
        _Datagrams, local_addr=("127.0.0.1", 0)
    )
    try:
        port = transport.get_extra_info("sockname")[1]
        await page.evaluate(_STUN_ATTEMPT, f"stun:127.0.0.1:{port}")
        await asyncio.sleep(UDP_GRACE_S)
    finally:
        transport.close()
    if listener.received:
        raise GuardBypassed(
            f"a page's WebRTC sent {listener.received} UDP datagrams to the gateway's "
            "loopback: the browser is not in a network jail"
        )
