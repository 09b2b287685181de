"""The Rollout view marks the rollout's first cliff token, the one `creditlens cliff` reports, and selects
it on request."""

from __future__ import annotations

from backend.evaluation import cliff_tokens
from backend.store import StoreHandle
from tests.app.conftest import open_app


def test_the_rollout_view_marks_and_selects_the_first_cliff(app_db):
    table = cliff_tokens.stored_cliffs(StoreHandle(app_db), "demo")
    first = table[table["first"] & (table["pos"] > 1)].iloc[0]
    rid, token = int(first["rollout_id"]), int(first["token"])
    at = open_app(app_db, "rollout", {"run": "demo", "rollout": str(rid)})
    marks = [c.value for c in at.caption if c.value.startswith("Cliff token")]
    assert len(marks) == 1 and f"token {token}" in marks[0], marks
    assert f"{first['p_prev']:.2f} → {first['p']:.2f}" in marks[0]
    assert at.number_input(key="rollout_pos").value != token
    at.button(key="rollout_cliff").click().run()
    assert not at.exception
    assert at.number_input(key="rollout_pos").value == token


def test_a_rollout_without_a_cliff_says_so(app_db):
    table = cliff_tokens.stored_cliffs(StoreHandle(app_db), "demo")
    clean = sorted(set(table["rollout_id"]) - set(table.loc[table["cliff"], "rollout_id"]))
    at = open_app(app_db, "rollout", {"run": "demo", "rollout": str(int(clean[0]))})
    assert any(c.value.startswith("No cliff token") for c in at.caption)
    assert not any(b.key == "rollout_cliff" for b in at.button)
