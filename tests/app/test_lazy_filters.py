"""The Explorer's flag and range filters sit in a lazy expander (issue 47): closed, its widgets are not drawn,
yet a filter set while it was open still applies, and reopened it shows the values it had."""

from __future__ import annotations

import re

from app import keys
from tests.app.conftest import open_app


def _matching(at) -> int:
    caption = next(c.value for c in at.caption if "rollouts match" in c.value)
    return int(re.match(r"(\d+) rollouts match", caption).group(1))


def test_a_flag_filter_still_applies_once_the_filters_are_closed(app_db):
    at = open_app(app_db, "explorer", {"run": "demo"}, opened=(keys.EXPLORER_FILTERS_OPEN,))
    everything = _matching(at)
    at.radio(key="explorer_flag_zero_variance").set_value("yes").run()
    assert not at.exception
    filtered = _matching(at)
    assert 0 < filtered < everything  # the demo has zero-variance groups and others

    at.session_state[keys.EXPLORER_FILTERS_OPEN] = False  # closed: no radio drawn, the filter kept
    at.run()
    assert not at.exception
    assert not [r for r in at.radio if r.key == "explorer_flag_zero_variance"]
    assert _matching(at) == filtered

    at.session_state[keys.EXPLORER_FILTERS_OPEN] = True  # reopened: the radio shows what it had
    at.run()
    assert not at.exception
    assert at.radio(key="explorer_flag_zero_variance").value == "yes"
    assert _matching(at) == filtered


def test_a_range_filter_still_applies_once_the_filters_are_closed(app_db):
    at = open_app(app_db, "explorer", {"run": "demo"}, opened=(keys.EXPLORER_FILTERS_OPEN,))
    everything = _matching(at)
    at.multiselect(key="explorer_ranged").set_value(["length"]).run()
    low, high = at.slider(key="explorer_range_length").value
    at.slider(key="explorer_range_length").set_value((low, (low + high) // 2)).run()
    assert not at.exception
    filtered = _matching(at)
    assert filtered < everything

    at.session_state[keys.EXPLORER_FILTERS_OPEN] = False
    at.run()
    assert not at.exception
    assert _matching(at) == filtered

    at.session_state[keys.EXPLORER_FILTERS_OPEN] = True
    at.run()
    assert not at.exception
    assert at.slider(key="explorer_range_length").value == (low, (low + high) // 2)
    assert _matching(at) == filtered
