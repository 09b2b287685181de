"""Compare: 2–6 estimators on the same rollout — small multiples, a difference, rank agreement, and
where the credit lands by token class (the "why did filler get credit" answer)."""

import streamlit as st

from app import compute, data, figures, state, views, widgets
from backend import analysis, estimates

sel = views.rollout_selection()
st.title(f"Compare estimators · rollout #{sel.rollout}")

unavailable = compute.unavailable(sel.db, sel.run, sel.group)
options = [n for n in widgets.estimator_names() if n not in unavailable]
default = [n for n in ("grpo", "entropy", "prefix_tree") if n in options] or options[:2]
chosen = widgets.url_multiselect(
    "Estimators (2–6)",
    options,
    key="compare_estimators",
    url="ests",
    default=default,
    least=2,
    max_selections=6,
    resolve=widgets.canonical_estimator,
)
widgets.unavailable_note(unavailable)
if len(chosen) < 2:
    st.warning("Pick at least two estimators.")
    st.stop()

channels = [*data.run_channels(sel.db, sel.run), estimates.ALL_CHANNELS]
channel = state.url_widget(
    st.selectbox, "Reward channel (all: the channel scores summed per rollout first, as TRL does)",
    key="compare_channel", url="channel", options=channels,
    default="task" if "task" in channels else channels[0],
)
configs = []
with st.expander("Parameters", expanded=False):
    for column, name in zip(st.columns(len(chosen)), chosen, strict=True):
        with column:
            st.markdown(f"**{views.plain(name)}**")
            configs.append((name, widgets.with_channel(name, widgets.estimator_form(name, key="compare_cfg"),
                                                       channel)))

result = views.compute_or_explain(compute.compare, sel.db, sel.run, sel.group, sel.rollout, tuple(configs))
for label, message in result["errors"].items():
    st.error(f"{views.plain(label)} cannot run on this run: {views.plain(message)}")
if len(result["rollout"]) < 1:
    st.stop()

st.subheader("Small multiples")
st.caption(f"Each estimator's advantage on the {views.plain(channel)} channel for this rollout, one shared "
           "colour scale.")
st.plotly_chart(
    figures.small_multiples(result["rollout"], result["tokens"]),
    key="compare_multiples",
    width="stretch",
    config={"displayModeBar": False},
)

st.subheader("Difference")
names = list(result["rollout"])
a_col, b_col = st.columns(2)
first = a_col.selectbox("A", names, index=0, key="compare_diff_a")
second = b_col.selectbox("B", names, index=min(1, len(names) - 1), key="compare_diff_b")
difference = analysis.credit_difference(result["rollout"][first], result["rollout"][second])
st.plotly_chart(
    figures.credit_heatmap({f"{second} − {first}": difference}, result["tokens"], clickable=False),
    key="compare_difference",
    width="stretch",
    config={"displayModeBar": False},
)

left, right = st.columns(2)
with left:
    st.subheader("Rank agreement")
    st.caption("Spearman ρ between estimators over every token of the group.")
    st.plotly_chart(
        figures.rank_agreement_figure(result["agreement"]), key="compare_agreement", width="stretch"
    )
with right:
    st.subheader("Credit mass by token class")
    st.caption(
        "Share of Σ|A| over the group per class; the dash is the class's share of tokens. A bar above "
        "its dash means that class gets more credit than its count."
    )
    st.plotly_chart(figures.class_mass_figure(result["mass"]), key="compare_mass", width="stretch")
st.dataframe(
    result["mass"].pivot(index="token_class", columns="estimator", values="credit_share"), width="stretch"
)
widgets.token_class_editor(sel)
