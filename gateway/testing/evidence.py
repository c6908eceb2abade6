"""A task's evidence as a test reads it, with assertions that say what was expected and
what was recorded instead.

    evidence.assert_called("agents.save_draft", status="succeeded")
    evidence.assert_not_called("browser.navigate")

Records are read from the gateway's evidence endpoint each time they are asked for, so an
assertion sees every call committed before it. A tool is named by its canonical id or by
the client-safe name MCP clients see; both match the same records.
"""

from __future__ import annotations

from typing import Any

from gateway.core.registry import exposed_name
from gateway.testing.control import ControlPlane


class Evidence:
    def __init__(self, control: ControlPlane, task_id: str) -> None:
        self._control = control
        self.task_id = task_id

    def records(self, kind: str | None = None) -> list[dict[str, Any]]:
        records = self._control.evidence(self.task_id)
        return [r for r in records if kind is None or r.get("kind") == kind]

    def calls(self, tool: str | None = None, **fields: Any) -> list[dict[str, Any]]:
        """The task's tool calls, in order; `tool` and any `field=value` narrow them."""
        wanted = None if tool is None else exposed_name(tool)
        return [
            call
            for call in self.records("call")
            if (wanted is None or exposed_name(str(call.get("tool", ""))) == wanted)
            and all(call.get(name) == value for name, value in fields.items())
        ]

    def assert_called(
        self,
        tool: str,
        *,
        status: str | None = "succeeded",
        times: int | None = None,
        door: str | None = None,
        output: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The last call of `tool` that matches; fails naming what was recorded instead.
        `output` matches when each of its keys has that value in the call's output."""
        every = self.calls(tool)
        matching = [
            call
            for call in every
            if (status is None or call.get("status") == status)
            and (door is None or call.get("door") == door)
            and (output is None or _contains(call.get("output"), output))
        ]
        wanted = _describe(tool, status, door, output)
        if times is not None and len(matching) != times:
            raise AssertionError(
                f"expected {wanted} {times} time(s), found {len(matching)}; "
                f"{_recorded(every, self.calls())}"
            )
        if not matching:
            raise AssertionError(f"expected {wanted}; {_recorded(every, self.calls())}")
        return matching[-1]

    def assert_not_called(self, tool: str) -> None:
        found = self.calls(tool)
        if found:
            statuses = ", ".join(str(c.get("status")) for c in found)
            raise AssertionError(f"expected no call of {tool}, found {len(found)} ({statuses})")


def _contains(actual: Any, expected: dict[str, Any]) -> bool:
    return isinstance(actual, dict) and all(
        key in actual and actual[key] == value for key, value in expected.items()
    )


def _describe(tool: str, status: str | None, door: str | None, output: Any) -> str:
    parts = [f"a call of {tool}"]
    if status is not None:
        parts.append(f"with status {status}")
    if door is not None:
        parts.append(f"through {door}")
    if output is not None:
        parts.append(f"with output containing {output}")
    return " ".join(parts)


def _recorded(of_tool: list[dict[str, Any]], every: list[dict[str, Any]]) -> str:
    if of_tool:
        seen = ", ".join(f"{c.get('status')} via {c.get('door')}" for c in of_tool)
        return f"its calls were: {seen}"
    tools = ", ".join(f"{c.get('tool')}:{c.get('status')}" for c in every[-10:]) or "none"
    return f"it was not called; the task's last calls: {tools}"
