"""Compare: 2–6 estimators on the same rollout — small multiples, a difference, rank agreement, and
where the credit lands by token class (the "why did filler get credit" answer)."""

import streamlit as st

from app import keys, state
from app.ui import (
    charts,
    class_editor,
    fmt,
    heatmaps,
    panels,
    run_set,
    same_prompt_panel,
    scales,
    sections,
    text,
    tuned_beta,
    widgets,
)
from app.view_data import compare as compare_data
from app.view_data import shared

sel = panels.rollout_selection()
side_by_side = run_set.compared_runs(sel)  # the sidebar's runs: their answers to this prompt, at the end
st.title(f"Compare estimators · rollout #{sel.rollout}")

unavailable = shared.unavailable(sel.db, sel.run, sel.group)
options = [n for n in widgets.estimator_names() if n not in unavailable]
default = [n for n in ("grpo", "entropy", "prefix_tree") if n in options] or options[:2]
chosen = widgets.url_multiselect(
    "Estimators (2–6)",
    options,
    key=keys.COMPARE_ESTIMATORS,
    url=keys.URL_ESTIMATORS,
    default=default,
    least=2,
    max_selections=6,
    resolve=widgets.canonical_estimator,
    format_func=widgets.described,
)
for name, reason in widgets.link_dropped(
    keys.URL_ESTIMATORS, options, unavailable, widgets.canonical_estimator
).items():
    st.warning(f"{text.plain(name)} (from the link) is not compared: {text.plain(reason)}")
widgets.unavailable_note(unavailable)
if len(chosen) < 2:
    st.warning("Pick at least two estimators.")
    st.stop()

channel_box, credit_box = st.columns(2)
with channel_box:
    channel = widgets.channel_picker(sel, "compare")
with credit_box:
    credit = widgets.credit_picker(keys.COMPARE_CREDIT)  # what the class-mass bars describe
tuned = tuned_beta.mark(sel.run, "compare")  # the β applied on the Tune view: in every A_final here
# the parameter forms: their widgets drawn only while the expander is open (closed: the values they last had)
params = widgets.lazy_expander("Parameters", keys.form_open(keys.COMPARE_FORM))
configs = []
for column, name in zip(
    params.columns(len(chosen)) if params is not None else [None] * len(chosen), chosen, strict=True
):
    if column is None:
        form = widgets.estimator_form(name, keys.COMPARE_FORM, drawn=False)
    else:
        column.markdown(f"**{text.plain(name)}**")
        form = widgets.estimator_form(name, keys.COMPARE_FORM, container=column)
    configs.append((name, widgets.with_channel(name, form, channel)))

result = panels.compute_or_explain(
    compare_data.compare, sel.db, sel.run, sel.group, sel.rollout, tuple(configs), sel.classes, credit, tuned
)
for label, message in result["errors"].items():
    st.error(f"{text.plain(label)} cannot run on this run: {text.plain(message)}")
if len(result["rollout"]) < 1:
    st.stop()

summed = channel == shared.ALL_CHANNELS
shown = "all channels (scores summed first)" if summed else f"the {channel} channel"
L = len(result["tokens"])
start, stop = panels.token_window(L, keys.COMPARE_WINDOW, result["rollout"][next(iter(result["rollout"]))])
if result["silent"]:  # every estimator gives the group no credit at all (said above every tab)
    undefined = (
        "Rank agreement is undefined here, and the credit mass by class is the other channels' credit alone"
        if credit == "final"
        else "Rank agreement and credit mass by class are undefined here"
    )
    st.info(
        f"None of these estimators gives this group any credit on {text.plain(shown)} (every token's "
        f"A is 0; e.g. a zero-variance group, whose responses all have the same score). {undefined}: pick a "
        "rollout of a group whose scores differ (the Explorer's zero-variance filter finds them)."
    )
# The small multiples, the difference of two and the agreement: tabs, each drawn only while open (a fresh
# load draws the first alone); the window of a long response, above them, holds for all three
TABS = {
    "multiples": "Small multiples",
    "difference": "Difference of two",
    "agreement": "Rank agreement · credit mass by class",
}
tabs = sections.lazy_tabs(TABS, keys.COMPARE_TAB, keys.URL_TAB)
if tabs["multiples"] is not None:
    with tabs["multiples"]:
        st.caption(
            f"Each estimator's advantage on {text.plain(shown)} for this rollout, one row each, aligned by "
            "token."
        )
        mode = widgets.row_scale_toggle("compare", result["rollout"])
        peaks = scales.scale_peaks(result["rollout"], mode)
        st.plotly_chart(
            heatmaps.small_multiples(
                {k: v[start:stop] for k, v in result["rollout"].items()},
                result["tokens"][start:stop],
                peaks=peaks,
                offset=start,
            ),
            key="compare_multiples",
            width="stretch",
            config={"displayModeBar": False},
        )
else:  # the scale stays in the URL and as it was set while its toggle is not drawn
    widgets.row_scale_toggle("compare", result["rollout"], drawn=False)
names = list(result["rollout"])
if tabs["difference"] is not None:
    with tabs["difference"]:
        pair = [n for n in (state.url_value(keys.URL_DIFFERENCE) or "").split(",") if n]
        if keys.COMPARE_DIFF_A not in st.session_state and pair:
            if len(pair) == 2 and all(n in names for n in pair):
                st.session_state[keys.COMPARE_DIFF_A], st.session_state[keys.COMPARE_DIFF_B] = pair
            else:
                state.link_warning(
                    keys.URL_DIFFERENCE,
                    ",".join(pair),
                    "it must name two of the compared estimators",
                    "the first two",
                )
        a_col, b_col = st.columns(2)
        first = a_col.selectbox("A", names, index=0, key=keys.COMPARE_DIFF_A)
        second = b_col.selectbox("B", names, index=min(1, len(names) - 1), key=keys.COMPARE_DIFF_B)
        state.publish(keys.URL_DIFFERENCE, f"{first},{second}")
        difference = shared.credit_difference(result["rollout"][first], result["rollout"][second])
        gap = scales.largest_abs(difference)  # the colour bar's ends: the largest difference, however small
        st.caption(
            f"{text.plain(second)} − {text.plain(first)} per token, on a scale centred at 0 whose ends are "
            f"the largest difference, ±{fmt.significant(gap, 2, signed=False)}."
            if gap > 0
            else f"{text.plain(second)} and {text.plain(first)} give every token the same credit."
        )
        st.plotly_chart(
            heatmaps.credit_heatmap(
                {f"{second} − {first}": difference[start:stop]},
                result["tokens"][start:stop],
                offset=start,
                clickable=False,
                zmax=gap or 1.0,
            ),
            key="compare_difference",
            width="stretch",
            config={"displayModeBar": False},
        )

if tabs["agreement"] is not None:
    with tabs["agreement"]:
        left, right = st.columns(2)
        with left:
            st.subheader("Rank agreement")
            st.caption("Spearman ρ between estimators over every token of the group.")
            st.plotly_chart(
                charts.rank_agreement_figure(result["agreement"]), key="compare_agreement", width="stretch"
            )
        with right:
            st.subheader("Credit mass by token class")
            of = (
                "each estimator's final A = Σ_c β_c·Ã_c (it on the outcome channels, every other channel by "
                f"its own projection{', with the tuned β' if tuned else ''}: what the Rollout view colours)"
                if credit == "final"
                else f"each estimator's A on {text.plain(shown)} alone (the rows above)"
            )
            st.caption(
                f"Share of Σ|A| over the group per class, A being {of}; the dash is the class's share of "
                "tokens. A bar above its dash means that class gets more credit than its count."
            )
            st.plotly_chart(charts.class_mass_figure(result["mass"]), key="compare_mass", width="stretch")
        numbers = widgets.lazy_expander("The numbers: share of Σ|A| per class", keys.COMPARE_NUMBERS_OPEN)
        if numbers is not None:
            shares = result["mass"].pivot(index="token_class", columns="estimator", values="credit_share")
            numbers.dataframe(
                shares,
                width="stretch",
                column_config={c: st.column_config.NumberColumn(c, format="percent") for c in shares.columns},
            )
class_editor.show(sel)
same_prompt_panel.draw(sel, side_by_side, chosen[0])
