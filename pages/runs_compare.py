"""Runs comparison: the runs side by side as `creditlens compare-runs` gives them, what differs on top."""

import pandas as pd
import streamlit as st

from app import keys, state
from app.ui import fmt, run_set, text, widgets
from app.view_data import runs as runs_data


def _cell(label: str, value) -> str:
    """A value as the Explorer shows it: shares in %, other numbers to 4 significant digits, '–' for none."""
    if value is None or (not isinstance(value, (str, list, dict)) and bool(pd.isna(value))):
        return "–"
    if "share_" in label and isinstance(value, float):
        return fmt.percent(value, digits=2)
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _table(table: pd.DataFrame) -> None:
    """Rows of the comparison, every label whole and every row shown (no scroll box of its own)."""
    label_width = min(480, 8 * max(len(str(label)) for label in table.index) + 32)
    st.dataframe(
        table,
        width="stretch",
        height=38 + 35 * len(table),
        column_config={"_index": st.column_config.TextColumn("", width=label_width, pinned=True)},
    )


sel = state.selection()
if sel.run is None:
    st.info("The store has no runs yet. Import one on the Runs page.")
    state.stop()

compared = run_set.compared_runs(sel)
st.title("Runs comparison")
if len(compared) < 2:
    st.info("Pick two to four runs under 'Runs side by side' in the sidebar.")
    state.stop()
estimator = widgets.estimator_picker(keys.RUNS_COMPARE_ESTIMATOR)
rows = runs_data.comparison(sel.db, tuple(compared), estimator)  # what differs first (compare-runs' order)
table = rows.drop(columns=["config"]).set_index("run").T.astype(object)  # the whole configuration: --json
differing = [c for c in runs_data.differing_columns(rows) if c in table.index]
table = pd.DataFrame(
    [[_cell(str(label), v) for v in values] for label, values in table.iterrows()],
    index=table.index,
    columns=list(table.columns),
)
st.caption(
    text.with_code(
        f"One column per run, {estimator}'s credit; what differs on top, the rest folded. Same numbers: "
        f"`creditlens compare-runs {' '.join(f'--run {r}' for r in compared)} --estimator {estimator} --json`"
    ),
    help=text.with_code(
        "Shares are of the final advantage at the first and last step; first_alert_step: the monitors' "
        "earliest warning (empty: quiet); config.<key>: the trainer settings that differ (settings first)."
    ),
)
same = [label for label in table.index if label not in differing]
if differing:
    st.subheader(f"What differs ({len(differing)})")
    _table(table.loc[differing])
else:
    st.info("These runs agree on every figure and setting compared.")
if same:  # folded, and drawn only while open (a table in a closed expander is still drawn on each load)
    box = widgets.lazy_expander(f"The same on every run ({len(same)})", keys.RUNS_COMPARE_SAME_OPEN)
    if box is not None:
        with box:
            _table(table.loc[same])
