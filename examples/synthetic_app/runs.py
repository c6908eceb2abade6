"""Evaluation runs: a simulated provider and the background state machine that drives runs.

A run moves `queued -> running -> completed | failed`; each of its scenarios moves
`pending -> running -> passed | failed | provider_error`. The provider is simulated (no
model is called) but the verdicts are decided, not random: an answer is correct when the
agent's instructions cover the scenario's terms and the agent has the tool it needs. A
scenario needing a provider the organization has no credentials for is a provider setup
error, reported as such and never as a wrong answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from examples.synthetic_app.directory import MODELS, ORGS
from examples.synthetic_app.models import RunBudget
from examples.synthetic_app.store import AppStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    state: str  # passed | failed | provider_error
    reason: str  # correct | incorrect_answer | budget_exceeded | provider_setup
    detail: str
    tokens: int


def evaluate(
    version: dict[str, Any], scenario: dict[str, Any], org_id: str, budget: RunBudget
) -> Verdict:
    """The simulated provider's answer to one scenario, judged against the scenario."""
    providers = ORGS[org_id].providers
    needed = [MODELS.get(version["model"], "unknown"), *filter(None, [scenario["provider"]])]
    for provider in needed:
        if provider not in providers:
            return Verdict(
                "provider_error",
                "provider_setup",
                f"provider setup error: the organization has no credentials for "
                f"provider '{provider}'",
                0,
            )
    instructions = version["instructions"].lower()
    tokens = 300 + 12 * len(version["instructions"].split())
    if tokens > budget.max_tokens:
        return Verdict(
            "failed",
            "budget_exceeded",
            f"the answer needed {tokens} tokens; the scenario budget is {budget.max_tokens}",
            budget.max_tokens,
        )
    missing = [term for term in scenario["required_terms"] if term.lower() not in instructions]
    tool = scenario["required_tool"]
    if missing:
        return Verdict(
            "failed",
            "incorrect_answer",
            f"the answer did not {', '.join(missing)} as the scenario expects",
            tokens,
        )
    if tool and tool not in version["tools"]:
        return Verdict("failed", "incorrect_answer", f"the answer needed the '{tool}' tool", tokens)
    return Verdict("passed", "correct", "the answer met every expectation", tokens)


class RunEngine:
    """Drives queued runs in background asyncio tasks, one task per run."""

    def __init__(self, store: AppStore, *, step_s: float = 0.4) -> None:
        self.store = store
        # Simulated provider latency per scenario, so progress is visible in the dashboard.
        self.step_s = step_s
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._changed = asyncio.Condition()
        # Bumped on every move of any run: a reader that saw generation N and finds it
        # moved on does not wait (a notification between its read and its wait is not lost).
        self.generation = 0

    async def start(self) -> None:
        await self.store.fail_interrupted("interrupted: the app stopped while the run was going")
        for run_id in await self.store.queued_run_ids():
            self.submit(run_id)

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()

    def submit(self, run_id: str) -> None:
        if run_id not in self._tasks:
            task = asyncio.create_task(self._drive(run_id), name=f"run {run_id}")
            self._tasks[run_id] = task
            task.add_done_callback(lambda _t: self._tasks.pop(run_id, None))

    async def wait_changed(self, wait_s: float, since: int | None = None) -> None:
        """Wait until any run moves past generation `since` (or `wait_s` passes)."""
        async with self._changed:
            if since is not None and self.generation != since:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), wait_s)

    async def _notify(self) -> None:
        async with self._changed:
            self.generation += 1
            self._changed.notify_all()

    async def _drive(self, run_id: str) -> None:
        plan = await self.store.run_plan(run_id)
        if plan["state"] != "queued":
            return
        org_id = plan["org_id"]
        try:
            await self.store.set_run_state(run_id, "running")
            await self._notify()
            verdicts: list[Verdict] = []
            for scenario in plan["scenarios"]:
                await self.store.set_scenario(run_id, scenario["id"], "running")
                await self._notify()
                await asyncio.sleep(self.step_s)
                verdict = evaluate(plan["version"], scenario, org_id, plan["budget"])
                await self.store.set_scenario(
                    run_id,
                    scenario["id"],
                    verdict.state,
                    reason=verdict.reason,
                    detail=verdict.detail,
                    tokens=verdict.tokens,
                )
                verdicts.append(verdict)
                await self._notify()
            # A run that produced no answer at all (every scenario hit a provider setup
            # error) failed; otherwise it completed, whatever its scenarios' verdicts.
            if verdicts and all(v.state == "provider_error" for v in verdicts):
                await self.store.finish_run(
                    org_id, run_id, "failed", error="every scenario hit a provider setup error"
                )
            else:
                await self.store.finish_run(org_id, run_id, "completed")
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.shield(
                    self.store.finish_run(org_id, run_id, "failed", error="the app stopped")
                )
            raise
        except Exception as exc:
            log.exception("run %s crashed", run_id)
            await self.store.finish_run(org_id, run_id, "failed", error=f"runner error: {exc!r}")
        await self._notify()
