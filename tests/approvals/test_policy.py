"""Which calls need a person: the task's policy against what its grant lacks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.core.approval_policy import ApprovalPolicy, Grantable, Need, approval_need

NONE: frozenset[str] = frozenset()


def policy(**kwargs: object) -> ApprovalPolicy:
    return ApprovalPolicy.model_validate(kwargs)


def test_a_call_the_grant_covers_runs_without_asking() -> None:
    assert approval_need(policy(), "agents.save_draft", NONE, False) is None


def test_a_required_tool_asks_even_within_the_grant() -> None:
    need = approval_need(policy(required=["agents.save_draft"]), "agents.save_draft", NONE, False)
    assert need == Need("actor", "required")


def test_outside_the_grant_and_not_grantable_stays_denied() -> None:
    grantable = [{"tool": "other.tool"}, {"scope": "evals:run"}]
    assert (
        approval_need(policy(grantable=grantable), "x.y", frozenset({"agents:write"}), False)
        is None
    )


def test_a_grantable_tool_asks_whoever_the_entry_names() -> None:
    by_user = policy(grantable=[{"tool": "agents.save_draft"}])
    need = approval_need(by_user, "agents.save_draft", frozenset({"agents:write"}), False)
    assert need == Need("actor", "beyond the grant")
    by_control = policy(grantable=[{"tool": "agents.save_draft", "by": "control"}])
    need = approval_need(by_control, "agents.save_draft", NONE, True)
    assert need == Need("control", "beyond the grant")


def test_a_grantable_scope_covers_only_what_it_names() -> None:
    p = policy(grantable=[{"scope": "agents:write"}])
    assert approval_need(p, "agents.save_draft", frozenset({"agents:write"}), False) is not None
    # Two scopes missing, one grantable: no prompt can make the call whole.
    assert approval_need(p, "x", frozenset({"agents:write", "evals:run"}), False) is None
    # A role or the task's own tool list refuses it: a scope grant does not reach that.
    assert approval_need(p, "agents.save_draft", frozenset({"agents:write"}), True) is None


def test_control_anywhere_makes_the_control_plane_decide() -> None:
    p = policy(grantable=[{"scope": "a:w"}, {"scope": "b:w", "by": "control"}])
    need = approval_need(p, "t", frozenset({"a:w", "b:w"}), False)
    assert need is not None
    assert need.by == "control"


@pytest.mark.parametrize(
    "body",
    [
        {"channels": []},
        {"channels": ["tab", "tab"]},
        {"channels": ["sms"]},
        {"timeout_s": 0},
        {"timeout_s": 601},
        {"grantable": [{"tool": "a.b", "scope": "c"}]},
        {"grantable": [{}]},
        {"grantable": [{"tool": "a.b", "by": "control"}], "channels": ["tab"]},
        {"required": ["has space"]},
        {"unknown": 1},
    ],
)
def test_a_bad_policy_is_refused(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ApprovalPolicy.model_validate(body)


def test_defaults_follow_the_contract() -> None:
    p = ApprovalPolicy()
    assert p.channels == ("tab", "control")
    assert p.timeout_s == 120
    assert Grantable(tool="a.b").by == "actor"
