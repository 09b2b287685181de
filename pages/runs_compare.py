"""Runs comparison: the runs side by side as `creditlens compare-runs` gives them, differences highlighted."""

import pandas as pd
import streamlit as st

from app import keys, state
from app.ui import run_set, text, widgets
from app.view_data import runs as runs_data


def _empty(value) -> bool:
    return value is None or (not isinstance(value, (str, list, dict)) and bool(pd.isna(value)))


sel = state.selection()
if sel.run is None:
    st.info("The store has no runs yet. Import one on the Runs page.")
    st.stop()

compared = run_set.compared_runs(sel)
st.title("Runs comparison")
if len(compared) < 2:
    st.info("Pick two to four runs under 'Runs side by side' in the sidebar.")
    st.stop()
estimator = widgets.estimator_picker(keys.RUNS_COMPARE_ESTIMATOR)
rows = runs_data.comparison(sel.db, tuple(compared), estimator)
differing = set(runs_data.differing_columns(rows))
table = rows.drop(columns=["config"]).set_index("run").T.astype(object)
table = table.map(lambda v: "–" if _empty(v) else (f"{v:.4g}" if isinstance(v, float) else str(v)))
table.columns.name = None
st.caption(
    text.with_code(
        f"One column per run, {estimator}'s credit (shares of the final advantage at the first and last "
        "step); highlighted: the rows whose values differ between the runs."
    ),
    help=text.with_code(
        "first_alert_step: the monitors' earliest warning (empty: quiet); config.<key>: the trainer settings "
        "that differ. Same numbers: "
        f"`creditlens compare-runs {' '.join(f'--run {r}' for r in compared)} --estimator {estimator} --json`"
    ),
)
st.dataframe(
    table.style.apply(
        lambda row: ["background-color: #fff3bf" if row.name in differing else "" for _ in row], axis=1
    ),
    width="stretch",
    height=min(36 * (len(table) + 1), 900),
)
