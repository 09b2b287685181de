"""Drill from a Trends point to its rollouts (issue 46 item 5): a point clicked on a Trends chart opens the
Explorer filtered to that step, the rows of `creditlens rollouts --where step=N`. AppTest cannot click a
Plotly point (nor rerun the page it switched to), so the click's request is set as the chart's callback
sets it (`drill.on_click`); the click, and the filter holding over the reruns that follow until it is
cleared, were driven in headless Chromium."""

from __future__ import annotations

import json

from app.ui import drill
from tests.app.conftest import open_app
from tests.conftest import run_cli_here


def _rows(at):
    (frame,) = [d.value for d in at.dataframe if "rollout_id" in d.value.columns]
    return frame


def test_a_clicked_step_opens_the_explorer_on_that_steps_rollouts(app_db):
    at = open_app(app_db, "trends", {"run": "demo"})
    assert any("Click a point to open that step" in c.value for c in at.caption)
    at.session_state[drill.DRILL_REQUEST] = ("demo", 2)
    at.run()
    assert not at.exception, at.exception
    assert at.title[0].value.startswith("Explorer")
    frame = _rows(at)
    assert set(frame["step"]) == {2}
    listed = run_cli_here("rollouts", "--db", app_db, "--run", "demo", "--where", "step=2", "--json")
    assert listed.returncode == 0, listed.stderr
    assert sorted(frame["rollout_id"]) == sorted(r["rollout_id"] for r in json.loads(listed.stdout))[:50]
    assert "step=2" in at.button(key="explorer_clear_where").label


def test_the_clicked_step_is_read_from_the_selection_event():
    assert drill.clicked_step(None) is None
    assert drill.clicked_step({"selection": {"points": []}}) is None
    assert drill.clicked_step({"selection": {"points": [{"x": 3, "y": 0.5}]}}) == 3
    assert drill.clicked_step({"selection": {"points": [{"y": 1}, {"x": 2.0}]}}) == 2
