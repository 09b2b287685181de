"""Drill from a trend to its rollouts (issue 46 item 5): a click on a point of a Trends chart opens the
Explorer filtered to that step (`?where=step=N`: the rows of `creditlens rollouts --where step=N`), as an
alert's link does. The click is a Plotly point selection; its callback asks for the switch, which the next
script run makes before drawing anything (`follow`)."""

from __future__ import annotations

import streamlit as st

from app import keys, navigation

EXPLORER_PAGE = navigation.script("explorer")
DRILL_REQUEST = "trends_drill_request"  # (run, step) a click asked to open
# A point selection only: the box and lasso tools would widen the toolbar over the chart's title.
CONFIG = {"displayModeBar": True, "displaylogo": False, "modeBarButtonsToRemove": ["select2d", "lasso2d"]}


def clicked_step(event) -> int | None:
    """The step (x) of the first point selected in a Plotly chart's selection event; None without one."""
    points = ((event or {}).get("selection") or {}).get("points") or []
    for point in points:
        x = point.get("x")
        if x is not None:
            return int(round(float(x)))
    return None


def on_click(run: str, key: str):
    """The chart's `on_select` callback: remember the clicked step for `follow`."""

    def ask() -> None:
        step = clicked_step(st.session_state.get(key))
        if step is not None:
            st.session_state[DRILL_REQUEST] = (run, step)

    return ask


def follow() -> None:
    """Open the Explorer on the step a click asked for (call first on the Trends view)."""
    request = st.session_state.pop(DRILL_REQUEST, None)
    if request is not None:
        run, step = request
        st.switch_page(EXPLORER_PAGE, query_params={keys.URL_RUN: run, keys.URL_WHERE: f"step={step}"})
