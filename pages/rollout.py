"""Rollout: one response's token credit as coloured text and as one heatmap row per channel, the
per-token strips under it, and why a token got its credit."""

import streamlit as st

from app import keys, state
from app.ui import cliff_marker, fmt, heatmaps, panels, scales, sections, tuned_beta, turns, widgets
from app.ui.attribution_panel import show as show_attribution
from app.view_data import rollout as rollout_data
from app.view_data import shared

sel = panels.rollout_selection()
st.title(f"Rollout #{sel.rollout}")
record = panels.prompt_and_response(sel)

pick, channel_box, params, position = st.columns([1, 1, 2, 1])
with pick:
    estimator = widgets.estimator_picker(
        keys.ROLLOUT_ESTIMATOR, shared.unavailable(sel.db, sel.run, sel.group)
    )
with channel_box:
    channel = widgets.channel_picker(sel, "rollout")
with params:  # its widgets drawn only while open
    config = widgets.with_channel(
        estimator, widgets.estimator_parameters(estimator, keys.ROLLOUT_FORM), channel
    )
widgets.unavailable_note(shared.unavailable(sel.db, sel.run, sel.group))
tuned = tuned_beta.mark(sel.run, "rollout")  # the β applied on the Tune view, if any

view = panels.compute_or_explain(
    shared.rollout_view,
    sel.db,
    sel.run,
    sel.group,
    sel.rollout,
    estimator,
    config,
    tuned,
    classes=sel.classes,
    channel=channel,
)
# Did the credit land: the realized change of each token's log π after the step's update, a row under the
# credit rows (`creditlens landed`); runs without it show none.
view = rollout_data.with_realized_row(view, rollout_data.realized_delta(sel.db, sel.run, sel.rollout))
# A click (on the text or on a heatmap cell) reruns the page: it selects that token (and the URL's `pos`),
# and both are drawn with the token outlined.
clicked = panels.new_click(keys.ROLLOUT_HEATMAP, n_rows=len(view.rows))
pending = st.session_state.pop(keys.ROLLOUT_TEXT_CLICKED, None)
for chosen in (clicked, pending):
    if chosen is not None:
        st.session_state[keys.ROLLOUT_POSITION] = chosen

with position:
    pos = state.url_widget(
        st.number_input,
        "Token position",
        key=keys.ROLLOUT_POSITION,
        url=keys.URL_POSITION,
        default=0,
        cast=int,
        min_value=0,
        max_value=max(len(view.tokens) - 1, 0),
        step=1,
    )

mode, _ = widgets.scale_controls("rollout", rows=view.rows)
peaks = scales.scale_peaks(view.rows, mode)
window = panels.heatmap_window(view, key=keys.ROLLOUT_WINDOW, peaks=peaks)

# On a wide screen the text and the channel rows sit side by side, both scrolling within the same height;
# the heatmap packs its cells into narrower bands there so token text stays readable.
text_col, rows_col = st.columns([2, 3], gap="medium")  # the rows need the width: cells fit their text
with text_col:
    st.subheader("Credit as text")
    st.caption(
        "Each token coloured by its final advantage (blue +, red −, scale "
        f"±{fmt.nice(peaks['final'], 2, signed=False)}).",
        help="The response as written: blue = positive credit, red = negative, white = 0. ↵ marks a newline. "
        "Hover a token for its facts; click it to see why it got its credit.",
    )
    if turns.turns_caption(record.get("turns")):
        st.caption(turns.turns_caption(record.get("turns")))
    text_click = panels.credit_text(
        view, window, peaks["final"], pos, key="rollout_text", turns=record.get("turns")
    )
    cliff_marker.show(
        sel.db, sel.run, sel.rollout, select_key=keys.ROLLOUT_TEXT_CLICKED, button_key="rollout_cliff"
    )
if text_click is not None and text_click != pos:
    st.session_state[keys.ROLLOUT_TEXT_CLICKED] = text_click
    state.rerun()
with rows_col:
    st.subheader("Credit by channel")
    st.caption(
        "One row per channel (β_c · Ã_c) and the final advantage.",
        help="Cells are sized to their token. Hover a cell for the token, its logprob, entropy and channel "
        "shares; click it to select it.",
    )
    # the token text under each band's last row only: the text beside already reads them, and text in every
    # cell was most of the browser's drawing of this chart (docs/benchmarks.md); the hover names each cell's
    # token
    figure = heatmaps.credit_heatmap(**window, highlight=[pos], band=panels.SIDE_BAND, cell_text="last")
    # a short response's rows need less than the side height: no blank box under them
    with st.container(height=min(panels.SIDE_HEIGHT, int(figure.layout.height) + 16), border=False):
        st.plotly_chart(
            figure,
            key=keys.ROLLOUT_HEATMAP,
            on_select="rerun",
            selection_mode="points",
            width="stretch",
            config={"displayModeBar": False},
        )
# Why this credit and the strips: tabs, each drawn only while open (a fresh load draws the first alone)
TABS = {
    "why": "Why this credit",
    "strips": "Per-token strips: logprob, reference, log-ratio, entropy, value",
    "moved": "Whose credit moved this token",
}
tabs = sections.lazy_tabs(TABS, keys.ROLLOUT_TAB, keys.URL_TAB)
if tabs["why"] is not None:
    with tabs["why"]:
        st.subheader(f"Why this credit: token {pos} {panels.quoted(view.tokens[pos]) if view.tokens else ''}")
        panels.why_this_credit(sel, view, pos, estimator, config, channel, tuned)
if tabs["strips"] is not None:
    with tabs["strips"]:
        panels.token_strips(view, window, pos, key="rollout_strips")
if tabs["moved"] is not None:
    with tabs["moved"]:
        st.subheader(
            f"Whose credit moved token {pos} {panels.quoted(view.tokens[pos]) if view.tokens else ''}"
        )
        show_attribution(sel, pos)
