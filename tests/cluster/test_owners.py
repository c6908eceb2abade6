"""What a node knows of its tasks' owners, as tables with the time passed in: a late word
about an older epoch drops nothing, a newer one makes the node let go, a belief lasts a
while, and a browser context lost in a move is told once."""

from __future__ import annotations

import pytest

from gateway.cluster import owners as owners_module
from gateway.cluster.owners import BELIEVED_S, Owner, Owners


def test_a_word_about_an_older_epoch_drops_nothing_and_a_newer_one_lets_go() -> None:
    owners = Owners("node-a")
    assert owners.take("task_1", Owner("node-a", 3, False))

    assert not owners.heard("task_1", None, 2, now=0.0)
    assert owners.held() == {"task_1": 3}
    assert owners.heard("task_1", "node-b", 4, now=0.0)
    assert owners.let_go("task_1") and not owners.let_go("task_1")
    assert owners.describe("task_1") == {"node_id": "node-a", "owner": "node-b", "epoch": 4}


def test_a_claim_answered_after_a_newer_owner_was_heard_of_is_not_taken_up() -> None:
    owners = Owners("node-a")
    owners.heard("task_1", "node-b", 5, now=0.0)
    assert not owners.take("task_1", Owner("node-a", 4, False))
    assert owners.epoch("task_1") is None
    assert owners.take("task_1", Owner("node-a", 6, False))
    assert owners.describe("task_1") == {"node_id": "node-a", "owner": "node-a", "epoch": 6}


def test_a_nodes_own_word_is_not_taken_for_another_nodes() -> None:
    owners = Owners("node-a")
    owners.take("task_1", Owner("node-a", 1, False))
    assert not owners.heard("task_1", "node-a", 9, now=0.0)
    assert owners.take("task_1", Owner("node-a", 2, False))


def test_a_belief_about_another_owner_lasts_a_while_then_the_ledger_is_asked() -> None:
    owners = Owners("node-a")
    owners.believe("task_1", Owner("node-b", 1, False), now=10.0)
    assert owners.believed("task_1", now=10.0 + BELIEVED_S / 2) == Owner("node-b", 1, False)
    assert owners.believed("task_1", now=10.0 + BELIEVED_S) is None
    owners.believe("task_1", Owner("node-b", 1, False), now=20.0)
    owners.doubt("task_1")
    assert owners.believed("task_1", now=20.0) is None


def test_an_end_forgets_the_owner_and_a_lost_browser_is_told_once() -> None:
    owners = Owners("node-a")
    owners.take("task_1", Owner("node-a", 2, False, browser_lost=True))
    owners.take("task_2", Owner("node-a", 2, False))
    told = owners.browser_moved("task_1")
    assert told is not None and "lost" in told
    assert owners.browser_moved("task_1") is None
    assert owners.browser_moved("task_2") is None
    owners.ended("task_1")
    assert owners.held() == {"task_2": 2}
    assert owners.describe("task_1")["owner"] is None


def test_the_newest_epochs_remembered_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(owners_module, "NEWEST_EPOCHS", 2)
    owners = Owners("node-a")
    for n in range(3):
        owners.heard(f"task_{n}", "node-b", 5, now=0.0)
    # The oldest word is forgotten: a claim of it is taken up again.
    assert owners.take("task_0", Owner("node-a", 1, False))
    assert not owners.take("task_2", Owner("node-a", 1, False))
