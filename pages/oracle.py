"""Oracle: how well each estimator finds the credit — against the true credit on synthetic runs, and
against the Monte Carlo teacher on real runs where resampled values exist."""

import urllib.parse

import streamlit as st

from app import data, keys, state
from app.ui import charts, sections, text, widgets
from app.view_data import oracle as oracle_data

sel = state.selection()
if sel.run is None:
    st.info("The store has no runs yet. Import one on the Runs page.")
    state.stop()
st.title(f"Credit quality · {text.plain(sel.run)}")

options = widgets.estimator_names(model_free=True)
default = [n for n in ("grpo", "entropy", "entropy_mix", "prefix_tree", "token_rm") if n in options]
chosen = widgets.url_multiselect(
    "Estimators",
    options,
    key=keys.ORACLE_ESTIMATORS,
    url=keys.URL_ESTIMATORS,
    default=default,
    format_func=widgets.described,
)
if not chosen:
    state.stop()

batch = data.group_batch(sel.db, sel.run, sel.group)
if oracle_data.has_oracle(batch):
    st.caption(
        "Synthetic run: the true key tokens and their credit are known. single = scores summed, then one "
        "estimator; split = channels projected and normalized separately, then combined.",
        help="The metrics: docs/estimators.md section 9. style_recall uses ΔA = A(task+style) − "
        "A(task only).",
    )
    needs_model = [n for n in widgets.estimator_names() if n not in options]
    st.caption(
        "Not offered on synthetic runs, which have no policy (needs a model): " + ", ".join(needs_model)
    )
    table, errors = oracle_data.oracle(sel.db, sel.run, tuple(chosen))
    for line in errors:
        st.warning(line)
    pipeline = state.url_widget(
        st.radio,
        "Pipeline",
        key=keys.ORACLE_PIPELINE,
        url=keys.URL_PIPELINE,
        default="split",
        options=["split", "single"],
        horizontal=True,
    )
    shown = table[table["pipeline"] == pipeline]
    # the chart and the table: tabs, each drawn only while open (a fresh load draws the chart alone)
    tabs = sections.lazy_tabs(
        {"chart": "Metrics by estimator", "table": "The numbers"}, keys.ORACLE_TAB, keys.URL_TAB
    )
    if tabs["chart"] is not None:
        tabs["chart"].plotly_chart(
            charts.oracle_metrics_figure(shown, oracle_data.METRICS), key="oracle_chart", width="stretch"
        )
    if tabs["table"] is not None:
        tabs["table"].dataframe(
            shown,
            hide_index=True,
            width="stretch",
            column_config={m: st.column_config.NumberColumn(m, format="%.3f") for m in oracle_data.METRICS},
        )
else:
    st.caption(
        "Real run: each estimator's advantage summed over a segment between valued positions, against the "
        "Monte Carlo teacher's V̂(next) − V̂(here) (`creditlens teacher-bench`).",
        help="V̂(s_t) comes from suffix resampling (`creditlens teacher`). Mean ± stderr over rollouts (what "
        "`creditlens teacher-bench --channel C` prints). The estimators read the chosen channel, and a "
        "rollout's last segment ends at its score there.",
    )
    channel = widgets.channel_picker(sel, "oracle")
    bench = oracle_data.teacher(sel.db, sel.run, tuple(chosen), channel)
    if bench is None:
        st.info(
            "No resampled values in this run yet: run `creditlens teacher` or resample some positions "
            "on the Resample page first."
        )
        state.stop()
    if bench.n_positions < oracle_data.teacher_bench.MIN_POSITIONS:
        st.warning(
            f"Only {bench.n_positions} valued positions in {bench.n_rollouts} rollouts: too few for these "
            f"numbers to separate estimators (at least {oracle_data.teacher_bench.MIN_POSITIONS} are needed; "
            "`creditlens teacher --run RUN` values many rollouts)."
        )
    else:
        st.caption(
            f"{bench.n_positions} valued positions in {bench.n_rollouts} rollouts, "
            f"{bench.n_segments} segments."
        )
    off_policy = bench.off_policy_note()
    if off_policy:
        st.warning(off_policy)
    shown_metrics = [m for m in oracle_data.teacher_bench.METRICS if bench.table[m].notna().any()]
    config = {
        m: st.column_config.NumberColumn(m, format="%.3f", help=oracle_data.teacher_bench.DEFINITIONS[m])
        for m in shown_metrics
    }
    config.update({f"{m}_se": st.column_config.NumberColumn("± se", format="%.3f") for m in shown_metrics})
    config.update(
        {
            f"{m}_se_group": st.column_config.NumberColumn(
                "± se (groups)",
                format="%.3f",
                help="stderr by a bootstrap over groups: rollouts of a group share a baseline",
            )
            for m in shown_metrics
        }
    )
    is_value = bench.table["kind"] == "value source"
    tables = (
        (bench.table[~is_value], oracle_data.teacher_bench.RANKED_METRICS, "oracle_teacher_table"),
        (bench.table[is_value], oracle_data.teacher_bench.VALUE_METRICS, "oracle_teacher_values"),
    )
    for rows, metrics, key in tables:
        metrics = [m for m in metrics if m in shown_metrics]
        if len(rows) and metrics:
            columns = ["estimator", "kind"] + [c for m in metrics for c in (m, f"{m}_se", f"{m}_se_group")]
            st.dataframe(
                rows[columns],
                hide_index=True,
                width="stretch",
                column_config=config,
                key=key,
                height=35 * (len(rows) + 1) + 3,
            )
    st.subheader("Calibration: is the teacher the policy that sampled?")
    st.caption(
        "Per step, the teacher's mean V̂(∅) against the observed accuracy of the same rollouts (mean ± "
        "stderr over rollouts).",
        help="A teacher that resampled with the step's own checkpoint agrees within the stderrs; an "
        "off-policy one values another policy. The table `creditlens teacher-bench` prints.",
    )
    st.dataframe(
        bench.calibration,
        hide_index=True,
        width="stretch",
        key="oracle_calibration",
        column_config={
            "v_empty": st.column_config.NumberColumn("V̂(∅)", format="%.3f"),
            "v_empty_se": st.column_config.NumberColumn("± se", format="%.3f"),
            "accuracy": st.column_config.NumberColumn("accuracy", format="%.3f"),
            "accuracy_se": st.column_config.NumberColumn("± se", format="%.3f"),
            "step_accuracy": st.column_config.NumberColumn("step accuracy (all)", format="%.3f"),
            "step_n": st.column_config.NumberColumn("step n"),
            "on_policy": st.column_config.NumberColumn("on-policy share", format="%.2f"),
            "policy": st.column_config.TextColumn("teacher"),
        },
    )
    with st.expander("Definitions", expanded=True):
        for m in shown_metrics:
            st.markdown(f"- **{m}**: {oracle_data.teacher_bench.DEFINITIONS[m]}")
        st.markdown(
            "- **sanity rows**: `chance` is what a predictor with no information scores; the best "
            "estimator inverted must fall below it, shuffled within each rollout must fall to it."
        )
        for line in bench.skipped:
            st.text(f"not scored: {line}")  # plain text: no markdown, no HTML
    bars = [
        m
        for m in ("spearman", "ranking_accuracy", "sign_accuracy", "critical_hit1", "first_wrong_hit1")
        if m in shown_metrics
    ]
    ranked = bench.table[bench.table["kind"].isin(["estimator", "uses teacher", "uses verifier", "sanity"])]
    st.plotly_chart(
        charts.oracle_metrics_figure(ranked, bars, error="_se"), key="oracle_teacher_chart", width="stretch"
    )

    st.subheader("Where an estimator misses")
    scored = bench.table["kind"].isin(["estimator", "uses teacher"])
    estimators = bench.table.loc[scored, "estimator"].tolist()
    left, right = st.columns(2)
    who = left.selectbox("Estimator", estimators, key="oracle_miss_estimator")
    metric = right.selectbox("Metric", list(oracle_data.teacher_bench.PER_ROLLOUT), key="oracle_miss_metric")
    misses = bench.misses(who, metric)
    if misses.empty:
        st.caption(f"{text.plain(who)} misses no rollout on {metric}.")
    else:
        run = urllib.parse.quote(sel.run)
        misses = misses.assign(
            open=[f"rollout?{keys.URL_RUN}={run}&{keys.URL_ROLLOUT}={r}" for r in misses["rollout_id"]]
        )
        st.dataframe(
            misses,
            hide_index=True,
            width="stretch",
            key="oracle_misses",
            column_config={
                "open": st.column_config.LinkColumn("open", display_text="open rollout"),
                metric: st.column_config.NumberColumn(metric, format="%.2f"),
            },
        )
