"""The sections a view draws only while open (issue 47, `app.ui.sections.lazy_tabs` and
`widgets.estimator_parameters`): a link opens the tab it names and keeps naming it, and a parameter set in an
open "Estimator parameters" expander still applies once the expander is closed."""

from __future__ import annotations

import numpy as np
import pytest

from app import keys
from tests.app.conftest import chart, heatmap_z, open_app, open_tab


def _url(at, name: str):
    value = at.query_params.get(name)
    return value[0] if isinstance(value, list) else value


def test_a_link_with_tab_replay_opens_the_replay_and_keeps_it_in_the_url(app_db):
    at = open_app(app_db, "tune", {"run": "demo", "rollout": "0", "tab": "replay"})
    assert at.session_state[keys.TUNE_TAB] == "Dual ascent replay · effect on the run"
    chart(at, "tune_replay")
    chart(at, "tune_effect")
    assert not any("tune_heatmap" in (c.proto.id or "") for c in at.get("plotly_chart"))  # β tab not drawn
    assert _url(at, keys.URL_TAB) == "replay"
    at.slider(key=keys.TUNE_ETA).set_value(5.0).run()  # a rerun of the page keeps the tab and its link
    assert not at.exception
    chart(at, "tune_replay")
    assert _url(at, keys.URL_TAB) == "replay"
    open_tab(at, keys.TUNE_TAB, "β per channel")  # the first tab: the link leaves it out
    chart(at, "tune_heatmap")
    assert keys.URL_TAB not in at.query_params


@pytest.mark.parametrize(
    ("page", "form", "heatmap"),
    [("rollout", keys.ROLLOUT_FORM, "rollout_heatmap"), ("compare", keys.COMPARE_FORM, "compare_multiples")],
)
def test_a_parameter_set_in_the_open_form_still_applies_once_it_is_closed(app_db, page, form, heatmap):
    query = {"run": "oracle", "rollout": "0", "est": "entropy", "ests": "grpo,entropy"}
    opened = keys.form_open(form)
    at = open_app(app_db, page, query, opened=(opened,))
    before = heatmap_z(chart(at, heatmap))
    field = keys.form_field(form, "entropy", "p")
    at.slider(key=field).set_value(3.0).run()
    assert not at.exception
    changed = heatmap_z(chart(at, heatmap))
    assert not np.allclose(np.nan_to_num(before), np.nan_to_num(changed))
    assert _url(at, keys.url_field("entropy", "p")) == "3.0"

    at.session_state[opened] = False  # the expander closed: its widgets are no longer drawn
    at.run()
    assert not at.exception
    assert not [s for s in at.slider if s.key == field]
    assert np.allclose(np.nan_to_num(heatmap_z(chart(at, heatmap))), np.nan_to_num(changed))
    assert _url(at, keys.url_field("entropy", "p")) == "3.0"

    at.session_state[opened] = True  # opened again: the widget shows the value it had
    at.run()
    assert not at.exception
    assert at.slider(key=field).value == 3.0


def test_the_row_scale_holds_while_its_tab_is_closed(app_db):
    """Compare's per-row scale toggle sits with the small multiples: on another tab it is not drawn, yet the
    URL keeps `?scale=row` (the link can be shared again) and the toggle is on when its tab is back."""
    at = open_app(app_db, "compare", {"run": "oracle", "rollout": "0"})
    at.toggle(key=keys.scale_mode("compare")).set_value(True).run()
    assert not at.exception
    assert _url(at, keys.URL_SCALE) == "row"
    open_tab(at, keys.COMPARE_TAB, "Difference of two")
    assert not [t for t in at.toggle if t.key == keys.scale_mode("compare")]
    assert _url(at, keys.URL_SCALE) == "row"
    open_tab(at, keys.COMPARE_TAB, "Small multiples")
    assert at.toggle(key=keys.scale_mode("compare")).value is True
    assert _url(at, keys.URL_SCALE) == "row"
    chart(at, "compare_multiples")


def test_a_link_with_the_row_scale_on_another_tab_keeps_it(app_db):
    at = open_app(app_db, "compare", {"run": "oracle", "rollout": "0", "scale": "row", "tab": "difference"})
    chart(at, "compare_difference")
    assert _url(at, keys.URL_SCALE) == "row" and _url(at, keys.URL_TAB) == "difference"
    open_tab(at, keys.COMPARE_TAB, "Small multiples")
    assert at.toggle(key=keys.scale_mode("compare")).value is True
