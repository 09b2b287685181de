"""Group: the G responses of one prompt aligned by position, and their prefix tree."""

import streamlit as st

from app import data, keys, state
from app.ui import charts, heatmaps, panels, scales, sections, text, tuned_beta, widgets
from app.view_data import group as group_data
from app.view_data import shared

state.follow_rollout_request()  # a response picked below in the last rerun opens the Rollout view
sel = panels.rollout_selection()
st.title(f"Group {sel.group}")
panels.group_header(sel, group_data.summary(sel.db, sel.run, sel.group), data.main_channel(sel.db, sel.run))

pick, channel_box = st.columns([2, 1])
with pick:
    estimator = widgets.estimator_picker(keys.GROUP_ESTIMATOR, shared.unavailable(sel.db, sel.run, sel.group))
with channel_box:
    channel = widgets.channel_picker(sel, "group")
config = widgets.with_channel(estimator, (), channel)
tuned = tuned_beta.mark(sel.run, "group")  # the β applied on the Tune view: in every row's final A
values, tokens, ids, untrained = panels.compute_or_explain(
    group_data.group_rows, sel.db, sel.run, sel.group, estimator, config, tuned, channel
)


def _open_response() -> None:
    picked = st.session_state.get(keys.GROUP_OPEN)
    st.session_state[keys.GROUP_OPEN] = None  # picking the same response again opens it again
    if picked is not None:
        state.request_rollout(picked)


# The aligned responses and the prefix tree: tabs, each drawn only while open (a fresh load draws the first)
TABS = {"aligned": "Responses aligned by position", "tree": "Prefix tree"}
tabs = sections.lazy_tabs(TABS, keys.GROUP_TAB, keys.URL_TAB)
if tabs["aligned"] is not None:
    with tabs["aligned"]:
        st.caption(
            f"One row per response: its final advantage ({text.plain(estimator)} on "
            f"{text.plain(channel)} with every other channel's credit"
            f"{' under the tuned β' if tuned else ''}), as the Rollout view's final row.",
            help=f"Rows are labelled by rollout id and R, the score on {text.plain(channel)}. Hover a cell "
            "for the token. Grey cells are not trained (loss mask 0: a tool's or an environment's tokens) "
            "and get no credit.",
        )
        mode, _ = widgets.scale_controls("group", rows=values)
        longest = max((len(v) for v in tokens.values()), default=0)
        peaks = scales.scale_peaks(values, mode)
        widest = max(values, key=lambda k: len(values[k]), default=None)  # its row is the overview strip
        start, stop = panels.token_window(
            longest, keys.GROUP_WINDOW, values.get(widest), peaks.get(widest), rows=len(values)
        )
        st.plotly_chart(
            heatmaps.credit_heatmap(
                {k: v[start:stop] for k, v in values.items()},
                [],
                row_tokens={k: v[start:stop] for k, v in tokens.items()},
                peaks=peaks,
                offset=start,
                clickable=False,
                untrained={k: v[start:stop] for k, v in untrained.items()},
            ),
            key="group_heatmap",
            width="stretch",
            config={"displayModeBar": False},
        )

        aligned = panels.compute_or_explain(
            group_data.aligned_turns, sel.db, sel.run, sel.group, estimator, config
        )
        if aligned is not None:  # an agent run: the responses side by side, turn by turn
            st.subheader("Turns aligned")
            st.caption(
                "One row per response, one column per turn in order: its role, its mean final advantage over "
                "its trained tokens (or 'not trained': a tool's output), and the start of its text. Same "
                f"rows: creditlens turns --run {text.plain(sel.run)} --group {sel.group} "
                f"--estimator {estimator}"
            )
            st.dataframe(aligned, hide_index=True, width="stretch")

        st.pills(
            "Open a response in the Rollout view",
            ids,
            format_func=lambda rid: f"#{rid}",
            key=keys.GROUP_OPEN,
            on_change=_open_response,
        )

if tabs["tree"] is not None:
    with tabs["tree"]:
        st.caption(
            "Each box is a run of tokens shared by the responses below it (width = responses, colour = "
            f"V(u), the mean outcome Z of its responses on {text.plain(channel)}).",
            help="Branch points carry the TD corrections V(child) − V(parent) that the prefix-tree estimator "
            "adds.",
        )
        tree, frame = panels.compute_or_explain(shared.group_tree, sel.db, sel.run, sel.group, channel)
        st.plotly_chart(charts.prefix_tree_figure(frame), key="group_tree", width="stretch")
        branches = frame[frame["parent"].isin(frame.loc[frame["branches"], "node_id"])]
        st.text(f"{int(frame['branches'].sum())} branch points, {len(frame)} nodes")
        st.dataframe(
            branches[["node_id", "parent", "label", "start", "end", "count", "value", "td"]],
            hide_index=True,
            width="stretch",
            column_config={
                "label": st.column_config.TextColumn("tokens"),
                "value": st.column_config.NumberColumn("V(u)", format="%+.3f"),
                "td": st.column_config.NumberColumn("TD correction", format="%+.3f"),
            },
        )
