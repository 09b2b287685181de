"""Tune: β per channel with live recompute against a baseline (the default β, or the summed reward: the
channel scores summed first, then the estimator), the share of |A| per channel, and a replay of dual
ascent (β trajectories and violation rates against τ) over the run's steps.

The β panel and the replay are two tabs, each drawn only while open (a fresh load draws the β panel
alone), and each a fragment: moving a β slider redraws only the heatmap and the shares; the replay starts
from the sliders' β as they were when it last ran (its widgets or its button rerun it), and says so.
The replay, each channel's violation threshold and a β's effect on the whole run are
`creditlens tune`'s numbers. Applying the replayed β makes it the session's tuned β (app/ui/tuned_beta.py):
the sliders, the URL and every view whose numbers weigh channels (Explorer and Trends shares of A_final,
Rollout, Group, Compare) then use it, with a "tuned β" mark and a reset; the sliders reach any β the
replay gives."""

import math

import streamlit as st

from app import data, keys, state
from app.ui import charts, heatmaps, panels, scales, sections, text, tune_charts, tuned_beta, widgets
from app.view_data import shared
from app.view_data import tune as tune_data

sel = panels.rollout_selection()
st.title(f"Tune channel weights · rollout #{sel.rollout}")

# β, τ and η weigh Credit Lens's recombination (a what-if beside what the trainer trained on): grpo by default
estimator = widgets.estimator_picker(
    keys.TUNE_ESTIMATOR, shared.unavailable(sel.db, sel.run, sel.group), default=data.WHAT_IF_ESTIMATOR
)
estimator_channel = widgets.channel_picker(sel, "tune")  # the estimator projects it; the others keep theirs
if estimator_channel == shared.ALL_CHANNELS:
    st.caption(
        "On all, the channel scores are summed before the estimator, so they share one β; pick one "
        "channel to weigh the others separately."
    )
defaults = tune_data.default_betas(sel.db, sel.run, sel.group, estimator_channel)
tuned = dict(tuned_beta.mark(sel.run, "tune"))
start_betas = {c: tuned.get(c, b) for c, b in defaults.items()}  # the sliders start at the tuned β
BASELINES = {"default": "the default β", "summed": "the summed reward (mixed)"}
default_norms = tune_data.default_normalizations(sel.db, sel.run, sel.group, estimator_channel)
BETA_LOW = 0.0
NORMALIZATIONS = ["group", "batch", "none"]


def _linked(channel: str) -> float:
    try:
        return float(state.url_value(keys.url_beta(channel)) or 0.0)
    except ValueError:
        return 0.0


# The sliders reach 3, or the largest β applied, linked or replayed (rounded up): no replayed β is cut.
BETA_HIGH = float(
    max(
        3,
        math.ceil(
            max(
                [
                    *start_betas.values(),
                    *map(_linked, defaults),
                    *st.session_state.get(keys.TUNE_APPLIED, {}).values(),
                    0.0,
                ]
            )
        ),
    )
)


def beta_sliders() -> dict[str, float]:
    """A β slider per channel in a row (mirrored to the URL), and the note of a β just applied."""
    betas = {}
    for column, (c, b0) in zip(st.columns(max(len(defaults), 3)), start_betas.items(), strict=False):
        with column:
            betas[c] = widgets.url_slider(
                f"β {c}",
                key=keys.tune_beta(c),
                url=keys.url_beta(c),
                default=b0,
                low=BETA_LOW,
                high=BETA_HIGH,
                step=0.05,
            )
    applied = st.session_state.pop(keys.TUNE_APPLIED, None)
    if applied is not None:
        st.success(
            "Applied the replayed β: "
            + ", ".join(f"{text.plain(c)} {b:g}" for c, b in applied.items())
            + ". Every view of this session uses it (the mark above; reset there)."
        )
    return betas


def normalization_choices() -> dict[str, str]:
    """The normalization per channel, its widgets drawn only while their expander is open."""
    box = widgets.lazy_expander("Normalization per channel", keys.TUNE_NORMALIZATION_OPEN)
    norms = {}
    for c, n0 in default_norms.items():
        if box is None:
            norms[c] = state.url_choice(
                keys.tune_normalization(c),
                url=keys.url_normalization(c),
                default=n0,
                options=NORMALIZATIONS,
            )
            continue
        norms[c] = state.url_widget(
            box.selectbox,
            f"{c}",
            key=keys.tune_normalization(c),
            url=keys.url_normalization(c),
            default=n0,
            options=NORMALIZATIONS,
            help="group: z-score over the group's tokens; batch: over the batch's; none: unchanged",
        )
    return norms


@st.fragment
@state.url_fragment
def channel_weights() -> None:
    # controls in a row above, the heatmaps at full width below (token text needs the width); the tab's
    # label is the section's title
    betas = beta_sliders()
    controls, options = st.columns([1, 1])
    chart = st.container()
    with options:
        norms = normalization_choices()
    beta_items = tuple(sorted(betas.items()))
    norm_items = tuple(sorted((c, m) for c, m in norms.items() if m != default_norms[c]))
    view = panels.compute_or_explain(
        shared.rollout_view,
        sel.db,
        sel.run,
        sel.group,
        sel.rollout,
        estimator,
        (),
        beta_items,
        norm_items,
        channel=estimator_channel,
    )
    with controls:
        baseline = state.url_widget(
            st.radio,
            "Baseline",
            key=keys.TUNE_BASELINE,
            url=keys.URL_BASELINE,
            default="none",
            options=["none", "side by side", "difference"],
            horizontal=True,
            help="The same rollout under a baseline, beside the tuned one or subtracted from it.",
        )
        against = state.url_widget(
            st.radio,
            "Against",
            key=keys.TUNE_AGAINST,
            url=keys.URL_AGAINST,
            default="default",
            options=list(BASELINES),
            format_func=BASELINES.get,
            horizontal=True,
            disabled=baseline == "none",
        )
    with chart:
        mode, locked = widgets.scale_controls(
            "tune", lockable=True, current=scales.scale_peaks(view.rows, "shared")["final"], rows=view.rows
        )
        peaks = scales.scale_peaks(view.rows, mode, locked)
        window = panels.heatmap_window(view, key=keys.TUNE_WINDOW, peaks=peaks)
        st.plotly_chart(
            # token text in each band's last row only (text in every cell was most of the chart's drawing)
            heatmaps.credit_heatmap(**window, clickable=False, title="tuned β", cell_text="last"),
            key="tune_heatmap",
            width="stretch",
            config={"displayModeBar": False},
        )
        if baseline != "none":
            baseline_chart(view, window, peaks, mode, baseline, against)
        shares = tune_data.group_shares(
            sel.db, sel.run, sel.group, estimator, (), beta_items, norm_items, estimator_channel
        )
        st.plotly_chart(
            charts.shares_figure(shares, "share of |A| per channel (this group)"),
            key="tune_shares",
            width="stretch",
            config={"displayModeBar": False},
        )


def baseline_chart(view, window: dict, peaks: dict, mode: str, how: str, against: str) -> None:
    """The baseline of the tuned heatmap's window: the default β (every row) or the summed reward (the
    final row: channel scores summed first, then the estimator), side by side or as tuned − baseline."""
    start, stop = window["offset"], window["offset"] + len(window["tokens"])
    if against == "default":
        base = panels.compute_or_explain(
            shared.rollout_view,
            sel.db,
            sel.run,
            sel.group,
            sel.rollout,
            estimator,
            (),
            tuple(sorted(defaults.items())),
            channel=estimator_channel,
        ).rows
        name = "default"
    else:
        summed = panels.compute_or_explain(
            tune_data.summed_reward_credit, sel.db, sel.run, sel.group, sel.rollout, estimator, ()
        )
        base, name = {"final": summed}, "summed"
    if how == "side by side":
        rows = {(k if against == "default" else "summed reward"): v[start:stop] for k, v in base.items()}
        base_peaks = {k: peaks.get(k, peaks["final"]) for k in rows}
        title = f"{BASELINES[against]} (same colour scale)"
    else:
        changed = [k for k in view.rows if k in base and k not in scales.OWN_SCALE_ROWS]
        rows = {
            f"{k}: tuned − {name}": shared.credit_difference(base[k], view.rows[k])[start:stop]
            for k in changed
        }
        base_peaks = scales.scale_peaks(rows, mode)
        title = f"tuned β − {BASELINES[against]}"
    st.plotly_chart(
        heatmaps.credit_heatmap(
            rows,
            window["tokens"],
            offset=start,
            peaks=base_peaks,
            clickable=False,
            title=title,
            cell_text="last",
            untrained=window["untrained"],
        ),
        key="tune_baseline_heatmap",
        width="stretch",
        config={"displayModeBar": False},
    )
    if against == "summed":
        st.caption(
            f"Summed reward: every channel's score added per rollout first (a missing score skipped), then "
            f"{text.plain(estimator)} on that one reward, as a mixed pipeline (and TRL) does; the numbers "
            f"of `creditlens estimate --estimator {text.plain(estimator)} --channel all`."
        )


def apply_betas(betas: dict[str, float]) -> None:
    """Make the replay's last-step β the session's tuned β (the other channels keep the sliders' β) and set
    the sliders to it (a callback: it runs before the sliders are drawn). The replay is a fragment, so its
    button reruns only the replay: the page is rerun whole after this (`dual_ascent_replay`)."""
    current = {c: slider_beta(c) for c in start_betas}  # the sliders are not drawn while the replay is open
    applied = tuned_beta.apply(sel.run, {**current, **betas})
    for channel, beta in applied.items():
        st.session_state[keys.tune_beta(channel)] = beta
    st.session_state[keys.TUNE_APPLIED] = {c: applied[c] for c in betas}
    st.session_state[keys.TUNE_TAB] = TABS["beta"]  # show the applied β: the sliders and the heatmap


def slider_beta(channel: str) -> float:
    """The β slider of `channel` as it is now, drawn or not (its tab closed: the value it last had, else the
    link's, else where it starts)."""
    key = keys.tune_beta(channel)
    for value in (st.session_state.get(key), st.session_state.get(keys.kept(key)), _linked_or_none(channel)):
        if value is not None:
            return float(value)
    return float(start_betas.get(channel, 1.0))


def _linked_or_none(channel: str) -> float | None:
    return _linked(channel) if state.url_value(keys.url_beta(channel)) is not None else None


@st.fragment
@state.url_fragment
def dual_ascent_replay() -> None:
    st.caption(
        "Constraint mode: keep each channel's violation rate_c ≤ τ_c, with β_c ← max(0, β_c + η (rate_c − "
        "τ_c)) at each logged step. A violation is a score below the channel's threshold (default: 0 for a "
        "channel that goes negative, 1 for a 0/1 reward, 0.5 for scores in [0, 1]). Projected: every "
        "channel's β moves at once by its own violation. Lexicographic: channels are served in priority "
        "order (the order of the τ sliders). The numbers of `creditlens tune`."
    )
    constrained = tune_data.constrained(sel.db, sel.run, estimator_channel)
    if not constrained:
        st.info(
            f"No channel to constrain on {text.plain(estimator_channel)}: "
            + (
                "the channel scores are summed and share one β, so no τ has a β to follow; pick one "
                "channel above to weigh the others separately."
                if estimator_channel == shared.ALL_CHANNELS
                else "the run has no other scored channel with a β of its own."
            )
        )
        return
    limits = tune_data.thresholds(sel.db, sel.run)
    cols = st.columns(len(constrained) + 2)
    tau, violation = {}, {}
    for col, channel in zip(cols, constrained, strict=False):
        with col:
            tau[channel] = widgets.url_slider(
                f"τ {channel}",
                key=keys.tune_tau(channel),
                url=keys.url_tau(channel),
                default=0.1,
                low=0.0,
                high=1.0,
                step=0.01,
            )
            t = limits[channel]
            violation[channel] = state.url_widget(
                st.number_input,
                f"violation: {channel} below",
                key=keys.tune_violation(channel),
                url=keys.url_violation(channel),
                default=float(t.default),
                cast=float,
                step=0.05,
                help=f"Scores in [{t.low:g}, {t.high:g}]; the default {t.default:g}: {t.why}.",
            )
    with cols[-2]:
        eta = widgets.url_slider(
            "η", key=keys.TUNE_ETA, url=keys.URL_ETA, default=1.0, low=0.0, high=10.0, step=0.1
        )
    with cols[-1]:
        mode = state.url_widget(
            st.radio,
            "mode",
            key=keys.TUNE_REPLAY_MODE,
            url=keys.URL_REPLAY_MODE,
            default="projected",
            options=["projected", "lexicographic"],
        )
    # The β sliders above, as they are now (this fragment does not rerun when they move).
    beta0 = {c: slider_beta(c) for c in start_betas}
    start, button = st.columns([4, 1])
    start.caption("Starts from β " + ", ".join(f"{text.plain(c)} {beta0[c]:g}" for c in tau))
    button.button("Replay from the current β", key="tune_replay_button")
    replay = tune_data.dual_ascent(
        sel.db, sel.run, tuple(tau.items()), eta, tuple(beta0.items()), mode, tuple(sorted(violation.items()))
    )
    st.plotly_chart(tune_charts.replay_figure(replay, beta0), key="tune_replay", width="stretch")
    last = replay[replay["step"] == replay["step"].max()] if len(replay) else replay
    replayed = {str(r.channel): float(r.beta) for r in last.itertuples(index=False)}
    if replayed:
        st.button(
            "Apply the replayed β (last step) to every view: "
            + ", ".join(f"{text.plain(c)} {b:.4g}" for c, b in replayed.items()),
            key="tune_apply_replayed",
            on_click=apply_betas,
            args=(replayed,),
        )
    if keys.TUNE_APPLIED in st.session_state:  # set by the Apply callback: draw the whole page with the new β
        state.rerun(scope="app")
    table = widgets.lazy_expander("The replay as a table: β per step", keys.TUNE_REPLAY_TABLE_OPEN)
    if table is not None:
        table.dataframe(replay.pivot(index="step", columns="channel", values="beta"), width="stretch")
    run_effect(beta0, replayed)


def run_effect(beta0: dict[str, float], replayed: dict[str, float]) -> None:
    """What a β does to the whole run against the default β: `creditlens tune`'s effect."""
    st.subheader("Effect on the whole run")
    which = state.url_widget(
        st.radio,
        "Effect of",
        key=keys.TUNE_EFFECT_OF,
        url=keys.URL_EFFECT_OF,
        default="replay",
        options=["replay", "sliders"],
        format_func={"replay": "the replayed β (last step)", "sliders": "the sliders' β"}.get,
        horizontal=True,
    )
    after = {**beta0, **replayed} if which == "replay" else beta0
    st.caption(
        "Before: the default β (" + ", ".join(f"{text.plain(c)} {b:g}" for c, b in defaults.items()) + "); "
        "after: " + ", ".join(f"{text.plain(c)} {b:.4g}" for c, b in after.items()) + ". Channel shares are "
        "of Σ|β_c Ã_c|, class shares of Σ|A_final| (the dash: the class's share of tokens), over every "
        "rollout of the run."
    )
    effect = panels.compute_or_explain(
        tune_data.run_effect,
        sel.db,
        sel.run,
        estimator,
        (),
        estimator_channel,
        tuple(sorted(after.items())),
    )
    st.plotly_chart(tune_charts.effect_figure(effect), key="tune_effect", width="stretch")
    st.plotly_chart(tune_charts.effect_steps_figure(effect), key="tune_effect_steps", width="stretch")


TABS = {"beta": "β per channel", "replay": "Dual ascent replay · effect on the run"}
tabs = sections.lazy_tabs(TABS, keys.TUNE_TAB, keys.URL_TAB)
if tabs["beta"] is not None:
    with tabs["beta"]:
        channel_weights()
if tabs["replay"] is not None:
    with tabs["replay"]:
        dual_ascent_replay()
