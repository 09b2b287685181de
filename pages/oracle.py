"""Oracle: how well each estimator finds the credit — against the true credit on synthetic runs, and
against the Monte Carlo teacher on real runs where resampled values exist."""

import streamlit as st

from app import compute, data, figures, state, views, widgets
from backend import analysis
from backend.metrics import METRICS

sel = state.selection()
if sel.run is None:
    st.info("The store has no runs yet. Import one on the Runs page.")
    st.stop()
st.title(f"Credit quality · {views.plain(sel.run)}")

options = widgets.estimator_names(model_free=True)
default = [n for n in ("grpo", "entropy", "entropy_mix", "prefix_tree", "token_rm") if n in options]
chosen = widgets.url_multiselect("Estimators", options, key="oracle_estimators", url="ests", default=default)
if not chosen:
    st.stop()

batch = data.group_batch(sel.db, sel.run, sel.group)
if analysis.has_oracle(batch):
    st.caption(
        "Synthetic run: the true key tokens and their credit are known (ESTIMATORS.md section 9). "
        "single = scores summed then one estimator; split = channels projected and normalized "
        "separately, then combined. style_recall uses ΔA = A(task+style) − A(task only)."
    )
    table, errors = compute.oracle(sel.db, sel.run, tuple(chosen))
    for line in errors:
        st.warning(line)
    pipeline = state.url_widget(
        st.radio,
        "Pipeline",
        key="oracle_pipeline",
        url="pipeline",
        default="split",
        options=["split", "single"],
        horizontal=True,
    )
    shown = table[table["pipeline"] == pipeline]
    st.dataframe(
        shown,
        hide_index=True,
        width="stretch",
        column_config={m: st.column_config.NumberColumn(m, format="%.3f") for m in METRICS},
    )
    st.plotly_chart(figures.oracle_metrics_figure(shown, METRICS), key="oracle_chart", width="stretch")
else:
    st.caption(
        "Real run: estimators are scored against the Monte Carlo teacher (segment differences of "
        "V̂ from suffix resampling) on the rollouts that have resampled values."
    )
    agreement = compute.teacher(sel.db, sel.run, tuple(chosen))
    if len(agreement) == 0:
        st.info("No resampled values in this run yet: resample some positions on the Resample page first.")
    else:
        st.dataframe(agreement, hide_index=True, width="stretch")
        st.plotly_chart(
            figures.oracle_metrics_figure(agreement, ["spearman", "sign_accuracy"]),
            key="oracle_teacher_chart",
            width="stretch",
        )
