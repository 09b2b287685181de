"""Rollout: one response's token credit, one heatmap row per channel, and why a token got its credit."""

import streamlit as st

from app import compute, figures, state, views, widgets

sel = views.rollout_selection()
st.title(f"Rollout #{sel.rollout}")
views.prompt_and_response(sel)

pick, params, position = st.columns([1, 2, 1])
with pick:
    estimator = widgets.estimator_picker("rollout_estimator", compute.unavailable(sel.db, sel.run, sel.group))
with params, st.expander("Estimator parameters"):
    config = widgets.estimator_form(estimator, key="rollout_cfg")
widgets.unavailable_note(compute.unavailable(sel.db, sel.run, sel.group))

view = views.compute_or_explain(
    compute.rollout_view, sel.db, sel.run, sel.group, sel.rollout, estimator, config
)
st.caption(
    "One row per channel (β_c · Ã_c) and the final advantage; blue = positive credit, red = negative, "
    "white = 0. Hover a cell for the token, its logprob, entropy and channel shares; click it to see why it "
    "got its credit."
)
# A click reruns the page with the clicked cell in the chart's state: it selects that token (and the URL's
# `pos`), and the heatmap is drawn with the token outlined.
clicked = views.new_click("rollout_heatmap", n_rows=len(view.rows))
if clicked is not None:
    st.session_state["rollout_pos"] = clicked

with position:
    pos = state.url_widget(
        st.number_input,
        "Token position",
        key="rollout_pos",
        url="pos",
        default=0,
        cast=int,
        min_value=0,
        max_value=max(len(view.tokens) - 1, 0),
        step=1,
    )

st.plotly_chart(
    figures.credit_heatmap(**views.heatmap_window(view, key="rollout_window"), highlight=[pos]),
    key="rollout_heatmap",
    on_select="rerun",
    selection_mode="points",
    width="stretch",
    config={"displayModeBar": False},
)

st.subheader(f"Why this credit: token {pos} {views.quoted(view.tokens[pos]) if view.tokens else ''}")
views.why_this_credit(sel, view, pos, estimator, config)
