"""The pool's browsers: Chromium processes launched here, and remote Playwright servers.

The pool has slots: `browser_processes` of them launch a Chromium here (or, with the
single `browser_ws_endpoint`, each connects to that server instead), and each of
`browser_ws_endpoints` connects to its server. A new context goes to the live slot with
the fewest contexts.

Each process is launched in the network jail (`jail.py`): its own network namespace, where
the only destination is the guard, as an unprivileged user with Chromium's own sandbox on.
The flags stay as a second line: loopback traffic is not exempt from a context's proxy
(`--proxy-bypass-list=<-loopback>`) and WebRTC may not send UDP around it. Every browser,
launched here or remote, must pass the guard probe before its first task
(`guard_probe.py`); a remote one passes only from inside this gateway's jail. A slot whose
browser dies (a process, or a server's connection) is reported to the listeners (the pool
fails its tasks' browsers) and relaunched or reconnected; the other slots and their tasks
go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from playwright.async_api import Browser, Playwright, async_playwright
from playwright.async_api import Error as PlaywrightError

from gateway.browser.chromium import dropped_features, find_chromium, launch_args
from gateway.core.errors import ToolFailure
from gateway.parts import BrowserProcessesConfig

from .errors import browser_unavailable
from .ffmpeg import driver_environment
from .guard_probe import GuardBypassed, probe_guard
from .jail import BrowserJail, JailUnavailable, network_namespace
from .memory import command_line, find_browser_pid

log = logging.getLogger(__name__)

GUARD_ARGS = (
    "--proxy-bypass-list=<-loopback>",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--dns-prefetch-disable",
)
# RenderDocument gives every new document a new frame host, and with it a new frame (and
# view) in the renderer, also for a same-site navigation. Off, a same-site navigation
# reuses the frame, as Chromium did before: measured here, goto of the same app page
# 40 -> 34 ms, and the renderer's CreateWebView and frame swap gone from each navigation.
# Site isolation (a process per site, per context) is not touched by it.
# The spare renderer: Chromium starts a renderer in advance, for the browser context that
# navigated last, and ends it when another context needs one. With the warm stock's
# contexts beside the tasks' (each a browser context of its own), every navigation of a
# task's page started a spare and ended the one before: a jailed renderer's start, about
# 30 ms of CPU per navigate, for a process no page used. A task's first page gets its
# renderer from its warm context, opened in advance already.
# Chromium's own calls to its services, which the guard would refuse (and record against the
# task) anyway: autofill's form lookups (seen on a page with a password field), translation,
# model downloads.
TASK_BROWSER_DISABLED_FEATURES = (
    "RenderDocument",
    "AutofillServerCommunication",
    "Translate",
    "OptimizationGuideModelDownloading",
    "SpareRendererForSitePerProcess",
)
LAUNCH_TIMEOUT_S = 30.0
# A slot whose launch or connection failed is not tried again in the background for this
# long while other slots serve: an endpoint that is down, or refused at its probe, would
# otherwise be dialled (and probed: a context and a page on it) for every new context.
# With no slot live, every call still tries them all at once.
RETRY_FAILED_AFTER_S = 5.0


@dataclass(eq=False)
class BrowserProcess:
    """One Chromium (or one connection to a remote Playwright server)."""

    index: int
    browser: Browser
    pid: int | None  # None for a remote browser
    marker: str
    endpoint: str | None = None  # the remote server's, None for a Chromium launched here
    # The jail whose guard socket this browser's contexts use (None: the browser reaches
    # the gateway's loopback, where each context's proxy listens on a port of its own).
    jail: BrowserJail | None = None
    contexts: int = 0  # task and warm contexts open on it (the pool's load measure)
    alive: bool = True
    died: asyncio.Event = field(default_factory=asyncio.Event)

    def context_opened(self) -> None:
        self.contexts += 1

    def context_closed(self) -> None:
        self.contexts -= 1


DeathListener = Callable[[BrowserProcess], None]


class BrowserProcesses:
    def __init__(
        self,
        config: BrowserProcessesConfig,
        *,
        local: int | None = None,
        jail: BrowserJail | None = None,
    ) -> None:
        """`local`: slots besides the endpoints' (default `config.processes`; 0 for remote
        browsers only)."""
        self.config = config
        local = config.processes if local is None else local
        # By slot index, what it connects to; None launches a Chromium here.
        self.endpoints: list[str | None] = [
            *[config.ws_endpoint or None] * local,
            *config.ws_endpoints,
        ]
        if not self.endpoints:
            raise ValueError("the browser pool needs a local process or a remote endpoint")
        self.count = len(self.endpoints)
        # The jail every browser of this pool runs in (a test may share one with a remote
        # server it launches itself); None when the setting turns the jail off.
        if jail is None and config.network_jail:
            jail = BrowserJail(config.user, guard_process=config.guard_process)
        self.jail = jail
        self._playwright: Playwright | None = None
        self._slots: list[BrowserProcess | None] = [None] * self.count
        self._launching: dict[int, asyncio.Task[BrowserProcess]] = {}
        self._failed_at: dict[int, float] = {}
        self._listeners: list[DeathListener] = []
        self._closing = False
        self._driver_lock = asyncio.Lock()
        self.launches = 0

    def on_death(self, listener: DeathListener) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def live(self) -> list[BrowserProcess]:
        return [s for s in self._slots if s is not None and s.alive]

    async def start(self) -> None:
        """Launch every slot now (otherwise the first `pick` launches them). Fails only when
        none starts: a slot that did not is tried again by a later `pick`."""
        await self._driver()
        results = await asyncio.gather(
            *(self._ensure(i) for i in range(self.count)), return_exceptions=True
        )
        if not self.live():
            raise _none_started(results)

    async def _driver(self) -> Playwright:
        async with self._driver_lock:
            if self._playwright is None:
                self._closing = False
                if self.jail is not None:
                    await self.jail.start()
                # Debian's ffmpeg, for the tasks that ask for a video (`ffmpeg.py`).
                with driver_environment(self.config.data_dir):
                    self._playwright = await async_playwright().start()
            return self._playwright

    async def close(self) -> None:
        self._closing = True
        for task in self._launching.values():
            task.cancel()
        for slot in self._slots:
            if slot is not None and slot.alive:
                slot.alive = False
                with contextlib.suppress(Exception):
                    await slot.browser.close()
        self._slots = [None] * self.count
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await self._playwright.stop()
            self._playwright = None
        if self.jail is not None:
            await self.jail.close()

    async def pick(self) -> BrowserProcess:
        """The live process with the fewest contexts, relaunching dead ones first."""
        if self._closing:
            raise browser_unavailable("the browser pool is shutting down")
        await self._driver()
        live = self.live()
        if len(live) < self.count:
            # Start the missing ones; wait only when nothing else is available.
            missing = [i for i, s in enumerate(self._slots) if s is None or not s.alive]
            if not live:
                results = await asyncio.gather(
                    *(self._ensure(i) for i in missing), return_exceptions=True
                )
                live = [r for r in results if isinstance(r, BrowserProcess) and r.alive]
                if not live:
                    raise _none_started(results)
            else:
                now = time.monotonic()
                for index in missing:
                    failed_at = self._failed_at.get(index)
                    if failed_at is None or now - failed_at >= RETRY_FAILED_AFTER_S:
                        self._ensure(index).add_done_callback(_quiet)
        return min(live, key=lambda s: s.contexts)

    def describe(self, index: int) -> str:
        """The slot for a log line: a remote one by its server's address (its path, which
        `launch-server` makes secret, is left out)."""
        endpoint = self.endpoints[index]
        if endpoint is None:
            return f"browser {index}"
        return f"browser {index} (remote, {urlsplit(endpoint).netloc})"

    def _ensure(self, index: int) -> asyncio.Future[BrowserProcess]:
        slot = self._slots[index]
        if slot is not None and slot.alive:
            done: asyncio.Future[BrowserProcess] = asyncio.get_running_loop().create_future()
            done.set_result(slot)
            return done
        task = self._launching.get(index)
        if task is None or task.done():
            task = asyncio.ensure_future(self._launch(index))
            self._launching[index] = task
        return task

    async def _launch(self, index: int) -> BrowserProcess:
        try:
            return await self._launch_slot(index)
        except BaseException:
            self._failed_at[index] = time.monotonic()
            raise

    async def _launch_slot(self, index: int) -> BrowserProcess:
        assert self._playwright is not None, "the browser processes are not started"
        marker = f"--gateway-browser={secrets.token_hex(8)}"
        endpoint = self.endpoints[index]
        try:
            if endpoint is not None:
                browser = await self._playwright.chromium.connect(
                    endpoint, timeout=LAUNCH_TIMEOUT_S * 1000
                )
                pid = None
            else:
                browser, pid = await self._launch_local(marker)
        except (PlaywrightError, OSError, RuntimeError) as exc:
            why = self._reason(index, exc)
            log.error("%s could not start: %s", self.describe(index), why)
            raise browser_unavailable(f"the browser could not start: {why}") from exc
        try:
            if self.jail is not None and endpoint is None:
                await self._check_jailed(pid)
            # A remote browser is usable only from inside a jail that reported here.
            await probe_guard(browser, self.jail, pid)
        except (GuardBypassed, JailUnavailable, PlaywrightError) as exc:
            # Fail closed: a browser the guard cannot see into serves no task.
            why = self._reason(index, exc)
            log.error("%s is not used: %s", self.describe(index), why)
            with contextlib.suppress(Exception):
                await browser.close()
            raise browser_unavailable(f"the browser is not used: {why}") from exc
        self.launches += 1
        self._failed_at.pop(index, None)
        slot = BrowserProcess(
            index=index,
            browser=browser,
            pid=pid,
            marker=marker,
            endpoint=endpoint,
            jail=self.jail,
        )
        browser.on("disconnected", lambda _b: self._died(slot))
        if self._closing:
            await browser.close()
            raise browser_unavailable("the browser pool is shutting down")
        self._slots[index] = slot
        return slot

    def _reason(self, index: int, exc: BaseException) -> str:
        """The error without the endpoint's path: `launch-server` makes that path the
        server's only secret, Playwright's call log names the endpoint whole, and the
        reason reaches the task's caller."""
        text = str(exc)
        endpoint = self.endpoints[index]
        if endpoint is not None:
            parts = urlsplit(endpoint)
            text = text.replace(endpoint, f"{parts.scheme}://{parts.netloc}")
            if parts.path not in ("", "/"):
                text = text.replace(parts.path, "/...")
        return text

    async def _launch_local(self, marker: str) -> tuple[Browser, int | None]:
        extra = [*GUARD_ARGS, marker]
        browser, pid = await self._launch_with(extra, marker)
        dropped = dropped_features(command_line(pid)) if pid is not None else {}
        if dropped:
            # Playwright switched on or off a feature that our switch of that kind does not
            # repeat (a Playwright other than the pinned one): launch again with the union.
            log.warning("relaunching Chromium to keep Playwright's features: %s", dropped)
            await browser.close()
            extra += [prefix + ",".join(names) for prefix, names in dropped.items()]
            browser, pid = await self._launch_with(extra, marker)
        return browser, pid

    async def _launch_with(self, extra: list[str], marker: str) -> tuple[Browser, int | None]:
        assert self._playwright is not None
        executable = find_chromium(self.config.executable)
        args = launch_args(
            extra=extra,
            disable_features=TASK_BROWSER_DISABLED_FEATURES,
            sandboxed=self.jail is not None,
        )
        if self.jail is None:
            browser = await self._playwright.chromium.launch(
                executable_path=executable, args=args, timeout=LAUNCH_TIMEOUT_S * 1000
            )
        else:
            browser = await self._playwright.chromium.launch(
                executable_path=self.jail.launcher,
                args=args,
                env={**os.environ, **self.jail.environment(executable)},
                chromium_sandbox=True,
                timeout=LAUNCH_TIMEOUT_S * 1000,
            )
        return browser, find_browser_pid(marker)

    async def _check_jailed(self, pid: int | None) -> None:
        """The launched browser reported in from its jail, and its network is not ours."""
        assert self.jail is not None
        if pid is None or not await self.jail.registered(pid):
            raise JailUnavailable("the browser's network jail did not report in")
        ours, its = network_namespace("self"), network_namespace(pid)
        if ours is None or its is None or ours == its:
            raise JailUnavailable("the browser runs in the gateway's own network namespace")

    def _died(self, slot: BrowserProcess) -> None:
        if not slot.alive:
            return
        slot.alive = False
        slot.died.set()
        if slot.jail is not None and slot.pid is not None:
            slot.jail.forget(slot.pid)
        if self._closing:
            return
        log.warning(
            "%s%s is gone; starting it again",
            self.describe(slot.index),
            "" if slot.pid is None else f" (pid {slot.pid})",
        )
        for listener in list(self._listeners):
            try:
                listener(slot)
            except Exception:
                log.exception("a browser death listener failed")
        self._ensure(slot.index).add_done_callback(_quiet)


def _none_started(results: list[BrowserProcess | BaseException]) -> ToolFailure:
    why = next((r.message for r in results if isinstance(r, ToolFailure)), "see the log")
    return browser_unavailable(f"no browser could be started ({why}); retry later")


def _quiet(future: asyncio.Future[BrowserProcess]) -> None:
    # A failed relaunch is retried by the next pick(); its error was logged already.
    if not future.cancelled():
        future.exception()
