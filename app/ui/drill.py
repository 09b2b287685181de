"""Drill from a trend to its rollouts: a click on a point of a Trends chart opens the
Explorer on that point's rollouts, as an alert's link does: a step's point its step (`?where=step=N`: the rows
of `creditlens rollouts --where step=N`); a class's point on the credit-share chart its step sorted by that
class's share, largest first; a bubble of the reward histogram the rollouts of its bin (the filter
`creditlens histogram` names). The click is a Plotly point selection; its callback asks for the switch,
which the next script run makes before drawing anything (`follow`)."""

from __future__ import annotations

import streamlit as st

from app import keys, navigation

EXPLORER_PAGE = navigation.script("explorer")
DRILL_REQUEST = "trends_drill_request"  # (run, where, sort) a click asked to open
# A point selection only: the box and lasso tools would widen the toolbar over the chart's title.
CONFIG = {"displayModeBar": True, "displaylogo": False, "modeBarButtonsToRemove": ["select2d", "lasso2d"]}


def _points(event) -> list[dict]:
    return ((event or {}).get("selection") or {}).get("points") or []


def _step(point: dict) -> int | None:
    x = point.get("x")
    return None if x is None else int(round(float(x)))


def clicked_step(event) -> int | None:
    """The step (x) of the first point selected in a Plotly chart's selection event; None without one."""
    return next((s for s in map(_step, _points(event)) if s is not None), None)


def clicked(event) -> tuple[str, str | None] | None:
    """(where, sort) of the first point selected: a point whose customdata is a filter (`step=…`, the reward
    histogram's bins) opens that filter; one whose customdata is a column (`share_<class>`, the class-share
    chart) opens its step sorted by that column; any other its step. None without a point."""
    for point in _points(event):
        data = point.get("customdata")
        data = data[0] if isinstance(data, list) and data else data
        if isinstance(data, str) and data.startswith("step="):
            return data, None
        step = _step(point)
        if step is not None:
            return f"step={step}", data if isinstance(data, str) and data.startswith("share_") else None
    return None


def on_click(run: str, key: str):
    """The chart's `on_select` callback: remember what the click asks to open for `follow`."""

    def ask() -> None:
        target = clicked(st.session_state.get(key))
        if target is not None:
            st.session_state[DRILL_REQUEST] = (run, *target)

    return ask


def follow() -> None:
    """Open the Explorer on what a click asked for (call first on the Trends view)."""
    request = st.session_state.pop(DRILL_REQUEST, None)
    if request is None:
        return
    run, where, sort = request
    params = {keys.URL_RUN: run, keys.URL_WHERE: where}
    if sort is not None:
        params |= {keys.URL_SORT: sort, keys.URL_DESCENDING: "True"}
    st.switch_page(EXPLORER_PAGE, query_params=params)
