"""The sidebar says what the page shows: a link that filters the Explorer to one step puts the Step picker on
that step, and the runs side by side follow the selected run where they held it alone."""

from __future__ import annotations

from app import keys
from tests.app.conftest import open_app


def test_a_link_filtered_to_one_step_puts_the_sidebar_on_that_step(app_db):
    at = open_app(app_db, "explorer", {"run": "demo", "where": "step=2"})
    assert at.selectbox(key=keys.STEP).value == 2
    assert "step 2" in at.selectbox(key=keys.ROLLOUT).format_func(at.selectbox(key=keys.ROLLOUT).value)
    at.selectbox(key=keys.STEP).set_value(3).run()  # the picker stays free while the filter applies
    assert at.selectbox(key=keys.STEP).value == 3


def test_the_runs_side_by_side_follow_the_run_selected_alone(app_db):
    at = open_app(app_db, "trends", {"run": "demo"})
    assert at.multiselect(key=keys.RUNS_COMPARED).value == ["demo"]
    at.selectbox(key=keys.RUN).set_value("kl-0.0").run()
    assert not at.exception, [e.message for e in at.exception]
    assert at.multiselect(key=keys.RUNS_COMPARED).value == ["kl-0.0"]
    at.multiselect(key=keys.RUNS_COMPARED).set_value(["kl-0.0", "kl-0.2"]).run()
    at.selectbox(key=keys.RUN).set_value("demo").run()  # runs chosen to compare stay
    assert at.multiselect(key=keys.RUNS_COMPARED).value == ["kl-0.0", "kl-0.2"]
