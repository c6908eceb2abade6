"""The shim's copy of the tab rules is generated from the Python models, and kept fresh."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from gateway.tabs import rules


def test_the_checked_in_rules_match_the_models() -> None:
    assert rules.stale() == [], "run: python -m gateway.tabs.rules"
    checked = subprocess.run(
        [sys.executable, "-m", "gateway.tabs.rules", "--check"], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr


def test_a_changed_rule_makes_the_files_stale(tmp_path: Path) -> None:
    for name, text in rules.files().items():
        (tmp_path / name).write_text(text)
    assert rules.stale(tmp_path) == []
    module = tmp_path / rules.MODULE
    # As if the summary's bound had been raised in Python and the shim not regenerated.
    module.write_text(module.read_text().replace('"maxLength": 4000', '"maxLength": 4001', 1))
    assert rules.stale(tmp_path) == [rules.MODULE]


def test_the_rules_carry_every_action_and_the_label_rule() -> None:
    compiled = rules.tab_rules()
    assert set(compiled["actions"]) == {
        "open_view",
        "populate_draft",
        "show_run_progress",
        "display_proposed_change",
        "read_view",
    }
    draft = compiled["actions"]["populate_draft"]["$defs"]["DraftFields"]["properties"]
    assert draft["name"]["anyOf"][0]["x-label"] is True
    assert draft["instructions"]["anyOf"][0]["x-text"] is True
    # The label rule is the Python one, character for character.
    for key in ("control", "whitespace", "url", "pseudo", "tag"):
        re.compile(compiled["label"][key])
    assert compiled["close"]["superseded"] == 4001


def test_the_target_tables_name_actions_and_their_fields() -> None:
    compiled = rules.tab_rules()
    actions = compiled["actions"]
    assert set(compiled["target"]["absolute"]) <= set(actions)
    for action, field in compiled["target"]["bound"].items():
        assert field in actions[action]["properties"]
