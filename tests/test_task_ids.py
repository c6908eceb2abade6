"""The task id pattern the shim checks a locality hint against is what the gateway makes
(the shim's compiled copy is checked against it by tests/tabs/test_rules.py)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

from gateway.core.tasks.service import TASK_ID_PATTERN
from gateway.runtime import Gateway
from gateway.settings import Settings
from tests.core_fixtures import new_task, started


@pytest.fixture
async def gw(settings: Settings) -> AsyncIterator[Gateway]:
    async for gateway in started(settings):
        yield gateway


async def test_made_task_ids_match_the_pattern(gw: Gateway) -> None:
    made = [(await new_task(gw))[0].task_id for _ in range(5)]
    assert len(set(made)) == len(made)
    for task_id in made:
        assert re.fullmatch(TASK_ID_PATTERN, task_id), task_id


def test_the_pattern_refuses_what_is_not_a_task_id() -> None:
    near = ["task_" + "A" * 24, "task_" + "a" * 23, "task_" + "a" * 25, "task_" + "a" * 24 + "\n"]
    for bad in ["../x", "task_X", *near]:
        assert not re.fullmatch(TASK_ID_PATTERN, bad), bad
