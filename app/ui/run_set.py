"""The runs side by side: a sidebar multiselect mirrored to `?runs=a,b,c`, shared by Trends and
the Runs comparison view. A link's run the store lacks is named in a warning and left out."""

from __future__ import annotations

import streamlit as st

from app import data, keys, state
from app.state import Selection

MAX_RUNS = 4


def compared_runs(sel: Selection) -> list[str]:
    """The runs chosen to be shown side by side (the selected run first by default: alone, one run)."""
    names = [r["name"] for r in data.list_runs(sel.db)]
    if keys.RUNS_COMPARED not in st.session_state:
        st.session_state[keys.RUNS_COMPARED] = _from_link(names) or [sel.run]
    chosen = [r for r in st.session_state[keys.RUNS_COMPARED] if r in names]
    # The run selected alone follows the selection (the run picker, a Live link's run landing), where the
    # list held it alone; runs chosen to compare stay.
    if chosen == [st.session_state.get(keys.RUNS_COMPARED_FOR)] and sel.run not in chosen:
        chosen = [sel.run]
    st.session_state[keys.RUNS_COMPARED_FOR] = sel.run
    st.session_state[keys.RUNS_COMPARED] = chosen
    st.sidebar.multiselect(
        "Runs side by side",
        names,
        key=keys.RUNS_COMPARED,
        max_selections=MAX_RUNS,
        help="Two to four runs: Trends draws a line per run and the Runs comparison view compares them "
        "(creditlens trends / compare-runs with one --run per run)",
    )
    chosen = list(st.session_state[keys.RUNS_COMPARED])
    state.publish(keys.URL_RUNS, ",".join(chosen) if len(chosen) > 1 else None)
    return chosen


def _from_link(names: list[str]) -> list[str]:
    wanted = [r for r in (state.url_value(keys.URL_RUNS) or "").split(",") if r]
    missing = [r for r in wanted if r not in names]
    if missing:
        state.link_warning(
            keys.URL_RUNS, ",".join(wanted), f"the store has no run {', '.join(missing)}", "the other runs"
        )
    return [r for r in wanted if r in names][:MAX_RUNS]
