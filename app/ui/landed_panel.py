"""Did the credit land: the realized Δ log π after each update beside the credit, as the Explorer, Trends
and Compare show it (each a collapsed section drawn only while open). Numbers from `app.view_data.landed`,
which calls `backend.credit.landed` as `creditlens landed` does."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from app.ui import text, widgets
from app.view_data import landed as landed_data
from backend.views import explorer_columns

TITLE = "Did the credit land? Credit vs the realized Δ log π after the update"
NONE_YET = (
    "This run has no realized change yet: it needs the TRL recorder's logprobs_after, or checkpoints saved "
    "after each update, which `creditlens landed --run {run}` scores (docs/trl.md)."
)
COLUMN_HELP = {
    **{c: explorer_columns.EXACT[c] for c in ("landed_spearman", "landed_sign", "landed_mean_delta")},
    "credit_share": "The class's share of Σ|credit| over the trained tokens.",
    "mean_delta": "Mean realized Δ log π of the class's trained tokens.",
    "mean_credit": "Mean credit of the class's trained tokens.",
}
"""The landed tables' headers: the per-rollout columns as the Explorer defines them (explorer_columns)."""


def _command(db: str, run: str, estimator: str | None, extra: str = "") -> str:
    return (
        f"creditlens landed --db {db} --run {run}"
        + (f" --estimator {estimator}" if estimator else "")
        + extra
    )


def _config(columns) -> dict:
    return {c: st.column_config.Column(c, help=h) for c, h in COLUMN_HELP.items() if c in columns}


@contextlib.contextmanager
def _opened(title: str, key: str, run: str, load: Callable[[], object]) -> Iterator[object]:
    """Inside the section's expander, what `load` gives; None while the expander is closed, or when the run
    has no realized change (said so in the expander)."""
    box = widgets.lazy_expander(title, key)
    if box is None:
        yield None
        return
    with box:
        found = load()
        if found is None:
            st.info(NONE_YET.format(run=text.plain(run)))
        yield found


def explorer_section(db: str, run: str, estimator: str, config: tuple, key: str) -> None:
    """Per rollout: Spearman and sign agreement of credit and Δ; per token class: credit share and mean Δ."""
    with _opened(TITLE, key, run, lambda: landed_data.landed_tables(db, run, estimator, config)) as tables:
        if tables is None:
            return
        st.caption(
            f"Credit: {text.plain(tables['estimator'])}. Δ log π from the {tables['source']} route, over the "
            "trained tokens. Per rollout:"
        )
        rollouts = tables["rollouts"]
        st.dataframe(rollouts, hide_index=True, width="stretch", column_config=_config(rollouts.columns))
        st.caption("Per token class: did the class that got credit rise?")
        classes = tables["classes"]
        st.dataframe(classes, hide_index=True, width="stretch", column_config=_config(classes.columns))
        text.text_block(_command(db, run, estimator, " --rollouts --json"))


def class_step_figure(frame: pd.DataFrame) -> go.Figure:
    """Per token class a line over steps: its share of Σ|credit| (left) beside its mean realized Δ log π
    (right). frame: step, token_class, credit_share, mean_delta (`landed.by_class(per_step=True)`)."""
    figure = make_subplots(
        rows=1, cols=2, subplot_titles=("share of |credit| by class", "mean realized Δ log π by class")
    )
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"]
    for i, (name, part) in enumerate(frame.groupby("token_class", sort=True)):
        color = palette[i % len(palette)]
        label = text.plain(str(name))
        for col, column in ((1, "credit_share"), (2, "mean_delta")):  # one legend entry per class
            figure.add_trace(
                go.Scatter(
                    x=part["step"],
                    y=part[column],
                    name=label,
                    legendgroup=label,
                    line={"color": color},
                    mode="lines+markers",
                    showlegend=col == 1,
                ),
                row=1,
                col=col,
            )
    figure.update_yaxes(tickformat=".0%", row=1, col=1)
    figure.update_xaxes(title_text="step")
    figure.update_layout(height=340, margin={"t": 40, "b": 40, "l": 40, "r": 10})
    return figure


def trends_section(db: str, run: str, estimator: str, config: tuple, key: str) -> None:
    """Per token class and step: the credit share beside the realized change; per step the agreement."""
    with _opened(TITLE, key, run, lambda: landed_data.landed_tables(db, run, estimator, config)) as tables:
        if tables is None:
            return
        st.plotly_chart(class_step_figure(tables["classes_by_step"]), key=f"{key}_chart", width="stretch")
        st.caption(
            f"Credit: {text.plain(tables['estimator'])}; Δ log π from the {tables['source']} route. Per "
            "step, Spearman ρ and sign agreement of credit and Δ over the trained tokens:"
        )
        st.dataframe(tables["steps"], hide_index=True, width="stretch")
        text.text_block(_command(db, run, estimator, " --json"))


def compare_section(db: str, run: str, estimators: list[str], key: str) -> None:
    """Per estimator: how well its credit predicts the realized change (which describes what the update
    did)."""
    title = "Which estimator's credit predicts the realized change?"
    with _opened(title, key, run, lambda: landed_data.landed_estimators(db, run, tuple(estimators))) as frame:
        if frame is None:
            return
        st.caption(
            "Over every trained token of the run with a realized Δ log π: Spearman ρ and sign agreement of "
            "each estimator's credit (default parameters) with Δ, and the mean of its per-step ρ."
        )
        st.dataframe(frame, hide_index=True, width="stretch")
        text.text_block(_command(db, run, None, f" --compare {','.join(estimators)} --json"))
