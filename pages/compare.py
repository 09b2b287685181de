"""Compare: 2–6 estimators on the same rollout, all read as one credit (the final A or a channel's term of
it) — small multiples, a difference, rank agreement, and where the credit and the penalty land by token class
(the "why did filler get credit" answer)."""

import streamlit as st

from app import data, keys, state
from app.ui import (
    charts,
    class_editor,
    credit_choice,
    fmt,
    heatmaps,
    landed_panel,
    panels,
    run_set,
    same_prompt_panel,
    scales,
    sections,
    text,
    tuned_beta,
    untrained_cells,
    widgets,
)
from app.view_data import compare as compare_data
from app.view_data import shared

sel = panels.rollout_selection()
side_by_side = run_set.compared_runs(sel)  # the sidebar's runs: their answers to this prompt, at the end
st.title(f"Compare estimators · rollout #{sel.rollout}")

unavailable = shared.unavailable(sel.db, sel.run, sel.group)
options = [n for n in widgets.estimator_names() if n not in unavailable]
# on a trainer's run the trainer's own credit first, Credit Lens's estimators beside it
opening = data.default_estimator(sel.db, sel.run)
default = [n for n in dict.fromkeys((opening, "grpo", "entropy", "prefix_tree")) if n in options][
    :3
] or options[:2]
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
    state.stop()

main = data.main_channel(sel.db, sel.run)
choices = compare_data.credit_choices(sel.db, sel.run, sel.group)
credit = credit_choice.picker(choices, keys.COMPARE_CREDIT, main)  # the one credit every chart below reads
credit_label = choices[credit][0]
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
    configs.append((name, widgets.with_channel(name, form, main)))

result = panels.compute_or_explain(
    compare_data.compare, sel.db, sel.run, sel.group, sel.rollout, tuple(configs), sel.classes, credit, tuned
)
for label, message in result["errors"].items():
    st.error(f"{text.plain(label)} cannot run on this run: {text.plain(message)}")
if len(result["rollout"]) < 1:
    state.stop()

L = len(result["tokens"])
untrained = result["untrained"]
start, stop = panels.token_window(L, keys.COMPARE_WINDOW, result["rollout"][next(iter(result["rollout"]))])
if result["silent"]:  # every estimator gives the group no credit at all (said above every tab)
    st.info(
        f"None of these estimators gives this group any {text.plain(credit_label)} (every token's A is 0; "
        "e.g. a zero-variance group, whose responses all have the same score). Rank agreement and credit "
        "mass by class are undefined here: pick another credit, or a rollout of a group whose scores differ "
        "(the Explorer's zero-variance filter finds them)."
    )
elif result["same"]:
    st.info(
        f"Every one of these estimators gives this group the same {text.plain(credit_label)}: their rows, "
        "difference and bars cannot differ. On a zero-variance group (every response has the same score) the "
        "final A is the token-level channels' terms alone, which no estimator changes; the outcome channel's "
        "credit is 0 for all of them."
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
            f"Each estimator's {text.plain(credit_label)} on this rollout, one row each, aligned by token. "
            "Grey cells are not trained (loss mask 0: a tool's or an environment's tokens): no credit."
        )
        mode = widgets.row_scale_toggle("compare", result["rollout"])
        peaks = scales.scale_peaks(result["rollout"], mode)
        st.plotly_chart(
            heatmaps.small_multiples(
                {k: v[start:stop] for k, v in result["rollout"].items()},
                result["tokens"][start:stop],
                peaks=peaks,
                offset=start,
                untrained=untrained[start:stop],
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
                untrained=untrained_cells.same_for_rows([f"{second} − {first}"], untrained[start:stop]),
            ),
            key="compare_difference",
            width="stretch",
            config={"displayModeBar": False},
        )

if tabs["agreement"] is not None:
    with tabs["agreement"]:
        st.subheader("Rank agreement")
        st.caption(
            f"Spearman ρ between estimators' {text.plain(credit_label)} over the group's trained tokens."
        )
        st.plotly_chart(charts.rank_agreement_figure(result["agreement"]), key="compare_agreement")
        st.subheader("Credit and penalty by token class")
        st.caption(
            f"Where each estimator's {text.plain(credit_label)}{' (tuned β)' if tuned else ''} lands over "
            "the group's trained tokens: per class its credit (A > 0, right of 0) and its penalty (A < 0, "
            "left, hatched), each a share of the estimator's Σ|A|, so a class's two bars add up to its share "
            "of Σ|A| and all bars of an estimator to 100 %. A class's share of tokens is in its label. Same "
            f"numbers: creditlens compare --run {text.plain(sel.run)} --rollout {sel.rollout} --credit "
            f"{text.plain(credit)} --json"
        )
        st.plotly_chart(charts.signed_mass_figure(result["mass"]), key="compare_mass", width="stretch")
        numbers = widgets.lazy_expander(
            "The numbers: credit and penalty per class, shares of Σ|A|", keys.COMPARE_NUMBERS_OPEN
        )
        if numbers is not None:
            shares = result["mass"].pivot(
                index="token_class", columns="estimator", values=["credit_share", "penalty_share"]
            )
            shares.columns = [
                f"{e} {'credit' if c == 'credit_share' else 'penalty'}" for c, e in shares.columns
            ]
            numbers.dataframe(
                shares,
                width="stretch",
                column_config={c: st.column_config.NumberColumn(c, format="percent") for c in shares.columns},
            )
class_editor.show(sel)
landed_panel.compare_section(sel.db, sel.run, chosen, keys.COMPARE_LANDED_OPEN)
same_prompt_panel.draw(sel, side_by_side, chosen[0])
