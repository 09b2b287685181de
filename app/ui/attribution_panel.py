"""The Rollout view's "Whose credit moved this token": on demand, every token of the group (or step) with its
first-order share of the change its step's update made to the selected token's log-prob, as a heatmap over
the responses (`creditlens attribution`, the same function)."""

from __future__ import annotations

import streamlit as st

from app import data, keys
from app.ui import heatmaps, panels, text
from app.view_data import attribution as attribution_data
from backend.core.errors import InputError

SCOPES = {"group": "this response's group", "step": "every response of its step"}
TOP = 10


def show(sel, pos: int) -> None:
    """The button, and the result once asked for this token (`sel`: the view's selection)."""
    st.caption(
        "To first order, the update on this step's batch changes log π of the selected token t by "
        "Σ_s lr · c_s · ⟨∇log π_s, ∇log π_t⟩ over the batch's tokens s: c_s is s's credit times its weight "
        "in the loss. Each cell is s's share: blue, s's credit pushed t up; red, down.",
        help="Gradients of the checkpoint that sampled the step, one plain SGD step with the run's learning "
        "rate and loss normalisation (Adam's per-parameter scaling and momentum are not modelled: the run "
        "keeps no optimizer state; docs/estimators.md says what that costs). Grey: not trained.",
    )
    used, no_model = data.rollout_model(sel.db, sel.run, sel.rollout)
    if no_model:
        st.info(f"No model for this step, so no gradients. {no_model}")
        return
    if data.settings().read_only:
        st.info("This server runs in read-only mode: model jobs, this one included, are switched off.")
        return
    left, right = st.columns([2, 1])
    with left:
        scope = st.radio(
            "Whose shares",
            list(SCOPES),
            format_func=SCOPES.get,
            horizontal=True,
            key=keys.ROLLOUT_ATTRIBUTION_SCOPE,
        )
    request = (sel.run, sel.rollout, int(pos), scope)
    with right:
        if st.button("Whose credit moved this token", key="rollout_attribution_run", type="primary"):
            st.session_state[keys.ROLLOUT_ATTRIBUTION] = request
    if st.session_state.get(keys.ROLLOUT_ATTRIBUTION) != request:
        st.caption(
            f"On demand: one backward and one forward-mode pass of {text.plain(used['model'])} "
            f"({used['label']}) over the {scope}."
        )
        return
    try:
        with st.spinner("Taking the gradients…"):
            result = attribution_data.attribution(sel.db, *request)
    except (InputError, ValueError, RuntimeError) as exc:  # said in place: the page goes on
        st.error(f"Attribution did not run: {exc}")
        return
    _draw(sel, result)


def _draw(sel, result) -> None:
    st.markdown(
        f"Predicted Δ log π of token {result.pos} {panels.quoted(result.token)}: "
        f"**{result.predicted:+.3g}**, the sum of {len(result.shares)} shares. "
        f"Model: {text.plain(result.model['why'])} ({result.model['label']}); credit: "
        f"{text.plain(result.estimator)}."
    )
    st.caption("; ".join(text.plain(n) for n in result.setup.notes))
    leave_out = st.checkbox(
        "Leave the token's own share out of the colours (⟨∇t, ∇t⟩ > 0 times its credit: often the largest)",
        key=keys.ROLLOUT_ATTRIBUTION_SELF,
    )
    values, tokens, untrained = attribution_data.heatmap_rows(result, leave_out)
    figure = heatmaps.credit_heatmap(values, [], row_tokens=tokens, clickable=False, untrained=untrained)
    figure.update_layout(coloraxis_colorbar_title_text="share")  # the cells are shares, not credit
    st.plotly_chart(
        figure,
        key="rollout_attribution_heatmap",
        width="stretch",
        config={"displayModeBar": False},
    )
    top = result.shares.reindex(result.shares["share"].abs().sort_values(ascending=False).index).head(TOP)
    st.dataframe(
        top[["rollout_id", "pos", "token", "advantage", "inner", "share"]],
        hide_index=True,
        width="stretch",
        column_config={
            "advantage": st.column_config.NumberColumn("credit A_s", format="%.3f"),
            "inner": st.column_config.NumberColumn("⟨∇s, ∇t⟩", format="%.3g"),
            "share": st.column_config.NumberColumn("share", format="%.3g"),
        },
    )
    st.caption(
        text.with_code(
            f"The same numbers: `creditlens attribution --run {sel.run} --rollout {result.rollout} "
            f"--pos {result.pos} --scope {result.scope} --json`"
        )
    )
