"""Trends: the run step by step — rewards, length, entropy, KL, zero-variance groups, where credit goes."""

import streamlit as st

from app import data, keys, state
from app.ui import (
    charts,
    drill,
    landed_panel,
    live,
    monitor_panel,
    panels,
    run_set,
    run_trends_panel,
    sections,
    text,
    tuned_beta,
    widgets,
)
from app.ui.fmt import safe
from app.view_data import shared
from app.view_data import trends as trends_data

drill.follow()  # a point clicked in the last run: its step's rollouts in the Explorer
sel = state.selection()
if sel.run is None:
    st.info("The store has no runs yet. Import one on the Runs page.")
    state.stop()

compared = run_set.compared_runs(sel)  # two or more: a line per run
following = live.follow(sel.db, sel.run, tuple(compared))  # Live: a step of any of them redraws the page
st.title(f"Trends · {text.plain(', '.join(compared) if len(compared) > 1 else sel.run)}")
panels.saved_classes_note(sel)
pick, channel_box, credit_box, params = st.columns([1, 1, 1, 2])
with pick:
    estimator = widgets.estimator_picker(keys.TRENDS_ESTIMATOR)
with channel_box:
    channel = widgets.channel_picker(sel, "trends")
with credit_box:
    credit = widgets.credit_picker(keys.TRENDS_CREDIT)
with params:  # its widgets drawn only while open
    config = widgets.with_channel(
        estimator, widgets.estimator_parameters(estimator, keys.TRENDS_FORM), channel
    )
if len(compared) > 1:
    run_trends_panel.draw(sel.db, compared, estimator, credit)
    state.stop()
if following and widgets.schema(estimator)["scope"] == "run":
    st.caption(
        f"Live: {estimator} is run-scoped (each of its numbers reads the whole run), so every new step "
        "recomputes it over the whole run; step- and group-scoped estimators compute the new step only."
    )
tuned = tuned_beta.mark(sel.run, "trends")  # the β applied on the Tune view: in A_final's shares
betas = tuned if credit == "final" else ()
frame = panels.compute_or_explain(trends_data.trends, sel.db, sel.run, estimator, config, credit, betas)
main = data.main_channel(sel.db, sel.run)
rewards = trends_data.reward_histogram(sel.db, sel.run)  # a dot per step and reward bin: a click opens them
st.caption(  # the definitions one hover away: two lines above the first chart
    f"One point per training step ({len(frame)} steps). Class shares are of Σ|A|, both signs, A being "
    + (
        f"the final advantage (every channel, {estimator} on the outcome channels"
        + (", β the tuned β)" if betas else ")")
        if credit == "final"
        else f"{estimator}'s advantages on the {text.plain(channel)} channel"
    )
    + ".",
    help=f"The quantiles are of {estimator}'s advantages on {text.plain(channel)}, each at the estimator's "
    "scope (what `creditlens estimate` gives). A step whose tokens got no credit has no share: a gap. "
    "Zero-variance groups: every response of the group has the same score on the run's main channel "
    f"({text.plain(main)}). Each chart's toolbar saves it as PNG.",
)

TOOLBAR = {"displayModeBar": True, "displaylogo": False}
scores = {c: c.removeprefix("score_") for c in frame.columns if c.startswith("score_")}
shares = {c: c.removeprefix("share_").replace("_", " ") for c in frame.columns if c.startswith("share_")}
excess = {c: c.removeprefix("excess_").replace("_", " ") for c in frame.columns if c.startswith("excess_")}
metrics = {c: c.removeprefix("metric_") for c in frame.columns if c.startswith("metric_")}
# The charts in four tabs, each drawn only while open: a fresh load draws the rewards' charts alone (the
# browser drawing every chart was most of the view's load; docs/benchmarks.md). A chart a run has no data
# for is left out (None); each is built only when its tab is open.
TABS = {
    "rewards": "Rewards",
    "distribution": "Reward distribution",
    "credit": "Where credit goes",
    "behaviour": "Length, entropy, KL, groups",
}
CHARTS = {
    "rewards": [
        (
            "trends_scores",
            lambda: charts.trend_lines(frame, {**scores, "reward": "reward (sum)"}, "mean score per channel"),
        ),
        (
            "trends_metrics",
            lambda: (
                charts.trend_lines(frame, metrics, "logged metrics (mean; not rewards)") if metrics else None
            ),
        ),
    ],
    "distribution": [("trends_rewards", lambda: charts.reward_bubbles(rewards) if len(rewards) else None)],
    "credit": [
        ("trends_classes", lambda: charts.class_share_trend(frame, shares) if shares else None),
        (
            "trends_excess",
            lambda: (
                charts.trend_lines(
                    frame, excess, "excess credit by class: share of |A| − share of tokens", percent=True
                )
                if excess
                else None
            ),
        ),
        ("trends_quantiles", lambda: charts.quantile_band(frame) if "q50" in frame.columns else None),
    ],
    "behaviour": [
        (
            "trends_length",
            lambda: charts.trend_lines(frame, {"length": "mean length (tokens)"}, "response length"),
        ),
        (
            "trends_entropy",
            lambda: charts.trend_lines(frame, {"mean_entropy": "mean entropy"}, "entropy (token mean)"),
        ),
        (
            "trends_kl",
            lambda: (
                charts.trend_lines(frame, {"kl": "mean logprob − ref logprob"}, "KL to the reference (k1)")
                if frame["kl"].notna().any()
                else None
            ),
        ),
        (
            "trends_groups",
            lambda: charts.trend_lines(
                frame,
                {"zero_variance_share": "zero-variance groups", "truncated_share": "truncated responses"},
                "share of groups whose summed score does not vary"
                if main == shared.ALL_CHANNELS
                # a channel name is the log's: escaped
                else f"share of groups with zero {safe(main)} variance",
                percent=True,
            ),
        ),
        (
            "trends_repetition",
            lambda: charts.trend_lines(
                frame, {"repetition": "repeated 16-token windows"}, "repetition", percent=True
            ),
        ),
    ],
}
# The charts come first: the monitors' first run on a big run takes seconds, and the alert marks are
# drawn into the same places once it is done (at once when this session has the report already).
st.caption(  # the run's name inside a code span, as written (with_code escapes only the text around it)
    "Click a point to open that step's rollouts in the Explorer.",
    help=text.with_code(
        f"The rows of `creditlens rollouts --run {sel.run} --where step=N`; a class's point, sorted by that "
        "class's share; a reward dot, the rollouts of its bin (`creditlens histogram` names each bin's "
        "filter)."
    ),
)
tabs = sections.lazy_tabs(TABS, keys.TRENDS_TAB, keys.URL_TAB)
tab_name, tab = next((name, box) for name, box in tabs.items() if box is not None)
ready = monitor_panel.report_ready(sel.db, sel.run, estimator, config)
with tab:
    shown = [
        (key, fig) for key, fig in ((key, build()) for key, build in CHARTS[tab_name]) if fig is not None
    ]
    slots = {}
    for start in range(0, len(shown), 2):
        for box, (key, fig) in zip(st.columns(2), shown[start : start + 2], strict=False):
            slots[key] = box.empty()
            if not ready:
                slots[key].plotly_chart(
                    fig, key=monitor_panel.unmarked_key(key), width="stretch", config=TOOLBAR
                )
health = panels.compute_or_explain(monitor_panel.report_for_session, sel.db, sel.run, estimator, config)
monitor_panel.toast_new(sel.run, health.alerts, following, (estimator, config))
for key, fig in shown:  # a click on a point opens that step's rollouts in the Explorer
    slots[key].plotly_chart(
        monitor_panel.mark_alerts(fig, health.alerts),
        key=key,
        width="stretch",
        config=drill.CONFIG,
        on_select=drill.on_click(sel.run, key),
        selection_mode="points",
    )
if tab_name == "behaviour" and frame["kl"].isna().all():
    tab.caption("No KL chart: this run has no reference logprobs.")

by_turn = (
    trends_data.turn_shares(sel.db, sel.run, estimator or "grpo", config if estimator else ())
    if tab_name == "credit"
    else None
)
if by_turn is not None and not by_turn.empty:  # an agent run: where the credit goes turn by turn
    wide = trends_data.turn_share_columns(by_turn)
    labels = {c: f"assistant turn {c.removeprefix('turn_')}" for c in wide.columns if c != "step"}
    tab.plotly_chart(
        charts.trend_lines(wide, labels, "share of |A_final| by assistant turn", percent=True),
        key="trends_turns",
        width="stretch",
        config=TOOLBAR,
    )
    tab.caption(
        f"Per step, each assistant turn index's share of Σ|A_final| ({estimator or 'grpo'} on the outcome "
        "channels) over the trained tokens; tool and environment turns are not trained and get none. Same "
        f"numbers: creditlens turns --run {text.plain(sel.run)} --estimator {estimator or 'grpo'}"
    )

landed_panel.trends_section(sel.db, sel.run, estimator, config if estimator else (), keys.TRENDS_LANDED_OPEN)

st.subheader("Credit health")
st.caption(
    "Each detector's onset: the first step departing from the run's own earlier steps by more than their "
    "noise; dashed lines on the charts above.",
    help=text.with_code(
        "How the onset is called: docs/monitors.md. Same alerts: "
        f"`creditlens monitor --db {sel.db} --run {sel.run} --estimator {estimator} --channel {channel}`"
    ),
)
monitor_panel.show_alerts(sel.run, health)

numbers = widgets.lazy_expander("The numbers (one row per step)", keys.TRENDS_NUMBERS_OPEN)
if numbers is not None:
    with numbers:
        st.dataframe(frame, hide_index=True, width="stretch")
        text.text_block(
            f"creditlens trends --db {sel.db} --run {sel.run} --estimator {estimator} --channel {channel}"
            + "".join(f" --set {k}={v}" for k, v in config if k != "channel")
            + ("" if credit == "final" else f" --credit {credit}")
            + "".join(f" --beta {c}={b:g}" for c, b in betas)
            + " --json"
        )
