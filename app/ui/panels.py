"""Pieces of screens shared by several views (no math: numbers come from `app.view_data`)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from app import data, keys, state
from app.state import Selection
from app.ui import charts, fmt, heatmaps, strip_figures, widgets
from app.ui import turns as turn_ui
from app.ui.text import plain, text_block, text_blocks
from app.view_data import rollout as rollout_data
from app.view_data import shared
from backend.credit import as_trained


def quoted(token: str) -> str:
    """A token for a markdown heading: escaped, whitespace visible, in backticks."""
    shown = str(token).replace("\n", "⏎").replace("`", "ˋ")
    return f"`{shown}`"


def rollout_selection() -> Selection:
    """The shared selection of a view about one rollout; explains and stops when there is none."""
    sel = state.selection()
    require_rollout(sel)
    return sel


def require_rollout(sel: Selection) -> None:
    if sel.run is None:
        st.info("The store has no runs yet. Import one on the Runs page.")
        state.stop()
    if sel.rollout is None:
        st.info(f"Run {plain(sel.run)} has no rollouts.")
        state.stop()


def prompt_and_response(sel: Selection) -> dict:
    """The prompt, response and sequence scores of the selected rollout, as plain text."""
    record = data.rollout(sel.db, sel.run, sel.rollout)
    scores = " · ".join(f"{k} {fmt.nice(v)}" for k, v in record["rewards"].items())
    st.caption(
        f"run {plain(sel.run)} · group {record['group_id']} · step {record['step']} · "
        f"{len(record['token_ids'])} tokens · {plain(scores)}"
    )
    with st.expander("Prompt and response", expanded=False):  # one element: drawn on every load, even closed
        text_blocks([("Prompt", record["prompt"] or ""), ("Response", record["response"] or "")])
    return record


def group_header(sel: Selection, summary, main: str | None = None) -> None:
    """The Group view's caption: the whole group's facts (responses, lengths, each channel's mean and range
    over the responses; `creditlens group`), the main channel first, then the group's prompt."""
    steps = ", ".join(map(str, summary.steps))
    channels = sorted(summary.channels, key=lambda c: c.channel != main)
    scores = " · ".join(
        f"{c.channel}: no scores"
        if c.mean is None
        else f"{c.channel} {fmt.nice(c.mean)} ({fmt.nice(c.min)} to {fmt.nice(c.max)})"
        for c in channels
    )
    flat = " · zero variance (every response scores the same on the main channel)" * summary.zero_variance
    st.caption(
        f"run {plain(sel.run)} · step {steps} · {summary.rollouts} responses · "
        + (
            f"{summary.length_min} tokens each"
            if summary.length_min == summary.length_max
            else f"{summary.length_min}–{summary.length_max} tokens (mean {summary.length_mean:.1f})"
        )
        + flat
    )
    st.caption(f"Scores over the group, mean (min to max): {plain(scores)}")
    record = data.rollout(sel.db, sel.run, sel.rollout)
    with st.expander("Prompt", expanded=False):
        text_block(record["prompt"] or "")


def saved_classes_note(sel: Selection) -> None:
    """Say so when this session's token classes are not the run's saved ones: the Explorer's and Trends'
    shares by class are summaries computed with the saved classes."""
    if sel.classes != data.token_classes(sel.db, sel.run):
        st.info(
            "Shares by token class here use the classes saved with the run; this session's classes (from the "
            "link or the class editor) apply to the Rollout and Compare views. Save them with the run "
            "(Compare → Token classes of this run) to use them here too."
        )


def compute_or_explain(fn, *args, **kwargs):
    """Run a cached computation; on a clear backend error show it and stop the view."""
    try:
        with st.spinner("Computing credit…"):
            return fn(*args, **kwargs)
    except (ValueError, KeyError, RuntimeError) as exc:
        st.error(f"{type(exc).__name__}: {exc}")
        state.stop()


def clicked_position(event, n_rows: int) -> int | None:
    """The token position of the last point clicked on a credit heatmap, if any."""
    points = []
    try:
        points = event.selection.points if event else []
    except AttributeError:
        points = (event or {}).get("selection", {}).get("points", [])
    if not points:
        return None
    return heatmaps.heatmap_position(dict(points[-1]), n_rows)


def new_click(chart_key: str, n_rows: int) -> int | None:
    """The token position clicked on heatmap `chart_key` since the last rerun, else None.

    Read from the chart's session state before the chart is drawn, so the view can outline the token in
    this rerun; a click is reported once (the chart keeps its selection across reruns)."""
    clicked = clicked_position(st.session_state.get(chart_key), n_rows)
    seen = keys.click_seen(chart_key)
    if clicked is None or clicked == st.session_state.get(seen):
        return None
    st.session_state[seen] = clicked
    return clicked


def why_this_credit(
    sel: Selection,
    view: shared.RolloutView,
    pos: int,
    estimator: str = "grpo",
    config: tuple = (),
    channel: str | None = None,
    betas: tuple = (),
) -> None:
    """Why the token got its final advantage (`betas`: the tuned β as (channel, β) pairs, or none): the
    waterfall of A_final into the channels' terms β_c·Ã_c and,
    as its rows, every channel's derivation with the numbers (`creditlens explain --pos`); `channel` (None:
    the run's main channel) is the one opened first, never a change to the credit. On `all`, the estimator
    on the scores summed first is a labelled what-if under them. Then the token's facts."""
    if not view.tokens:
        st.info("This rollout has no tokens.")
        return
    pos = min(max(int(pos), 0), len(view.tokens) - 1)
    explained = compute_or_explain(
        rollout_data.explanation, sel.db, sel.run, sel.rollout, estimator, config, channel, betas
    )
    terms = explained.terms
    parts = rollout_data.derivations(explained, pos)
    if parts["untrained"]:  # no estimator, channel or β reaches it: its derivation is that one line
        text_block("\n".join(parts["final"]))
        return
    note = data.credit_note(sel.db, sel.run, estimator)
    if estimator in as_trained.TRAINER_ESTIMATORS:
        st.markdown(
            f"**{plain(note or estimator)}**. Each reward function's row is its term of that advantage; "
            "the rows add up to it (no KL row: the trainer put KL in its loss)."
        )
    else:
        st.markdown(
            (f"{plain(note)}.  \n" if note else "")
            + f"**{plain(estimator)}** on the outcome channels, computed at **{terms['scope']}** scope; "
            "every other channel by its own projection. A_final = Σ_c β_c·Ã_c whichever channel is picked: "
            "the picker opens that channel's derivation first."
        )
    chart, facts = st.columns([2, 1])
    contributions = {c: value for c, (value, _) in parts["channels"].items()}
    with chart:
        st.plotly_chart(
            charts.contribution_waterfall(contributions, float(view.final[pos])),
            key="rollout_waterfall",
            width="stretch",
            config={"displayModeBar": False},
        )
    looked_at = explained.channel
    # the waterfall's rows: the channel looked at first, then by the size of their term (a 0 says why too)
    order = sorted(parts["channels"], key=lambda c: (c != looked_at, -abs(contributions[c])))
    text_blocks(
        [(f"{c} {fmt.nice(parts['channels'][c][0], 4)}", "\n".join(parts["channels"][c][1])) for c in order]
        + [(None, "\n".join(parts["final"]))]
    )
    if parts["what_if"] is not None:
        label, value, lines = parts["what_if"]
        st.info(
            f"{plain(label)}: {fmt.nice(value, 4)} at this token; the baseline A_final stays "
            f"{fmt.nice(view.final[pos], 4)}."
        )
        text_block("\n".join(lines) or "(no terms)")
    info = view.token_info.iloc[pos]
    tree, _ = shared.group_tree(sel.db, sel.run, sel.group, channel)
    node = tree.node_at(view.row, pos)
    with facts:
        st.metric("final A", fmt.nice(view.final[pos]))
        text_block(  # one block, not a text element per line (docs/benchmarks.md)
            "\n".join(
                [
                    f"token      {info['token']!r}",
                    f"class      {info['token_class']}",
                    f"logprob    {fmt.nice(info['logprob'], 4)}",
                    f"entropy    {fmt.nice(info['entropy'], 4, signed=False)}",
                    "value      " + _value_line(terms, info, pos),
                    f"tree node  #{node.node_id}: tokens [{node.start}, {node.end}), {len(node.members)} "
                    f"responses, V(u) {node.value:+.3f}"
                    + (", branch point" if node.branches and pos == node.end - 1 else ""),
                    "β          " + ", ".join(f"{c} {b:g}" for c, b in view.betas.items()),
                ]
            )
        )


def _value_line(terms: dict, info, pos: int) -> str:
    """The value that fed the estimator at `pos` (its own V(s_t) and source), else the stored critic's."""
    values = terms["tokens"].get("values")
    if values is not None and pos < len(values) and values[pos] is not None:
        source = terms["notes"].get("value_source", "the estimator")
        return f"{_num(values[pos])} (V(s_t) from {source})"
    stored = _num(info["value"])
    if stored != "–":
        return f"{stored} (stored critic; this estimator uses no value)"
    return "– (no value source: this estimator uses none and the run stores no critic values)"


def _num(v) -> str:
    return fmt.nice(v, 4)


SIDE_HEIGHT = 440  # px: the text view and the channel rows beside it scroll within this height
SIDE_BAND = 32  # heatmap band width (units of about two characters) in a half-width column
WINDOW = 512  # tokens drawn at once in every view that draws tokens; longer responses a window at a time
# Cells (rows × tokens) a window of a many-row heatmap holds: the browser's time goes to each cell's token
# text, so the Group view of 8 responses of 512 tokens drew 4,096 cells in 3x the demo's page time
# (docs/benchmarks.md, "The views on a real-size run"); 2,048 is what the Rollout view of such a run draws.
WINDOW_CELLS = 2048


def window_tokens(rows: int) -> int:
    """Tokens in a window of a heatmap of `rows` rows: WINDOW, or fewer (whole bands, at least one) when
    `rows` × WINDOW would pass WINDOW_CELLS."""
    fit = WINDOW_CELLS // max(rows, 1) // heatmaps.BAND * heatmaps.BAND
    return min(WINDOW, max(heatmaps.BAND, fit))


def token_window(
    L: int, key: str, overview: np.ndarray | None = None, peak: float | None = None, rows: int = 1
) -> tuple[int, int]:
    """The one windowing rule of every view that draws tokens: responses up to a window's tokens are drawn
    whole; longer ones a window at a time, picked from a list of ranges (mirrored to the URL as `from`), with
    a whole-response overview strip (`overview`: (L,) values) marking the window. A window is WINDOW tokens,
    fewer for a heatmap of many `rows` (`window_tokens`)."""
    size = window_tokens(rows)
    start = 0
    if L > size:
        starts = list(range(0, L, size))
        start = state.url_widget(
            st.selectbox,
            "Tokens shown",
            key=key,
            url=keys.URL_WINDOW,
            default=0,
            cast=int,
            options=starts,
            format_func=lambda s: f"{s}–{min(s + size, L) - 1} of {L}",
        )
        if overview is not None:
            st.plotly_chart(
                strip_figures.overview_strip(overview, start, min(start + size, L), peak),
                key=f"{key}_overview",
                width="stretch",
                config={"displayModeBar": False},
            )
    return start, min(start + size, L)


def heatmap_window(view: shared.RolloutView, key: str, peaks: dict[str, float] | None = None) -> dict:
    """Keyword arguments for `heatmaps.credit_heatmap` showing the window of `token_window` (drawn here,
    with the overview strip of the final advantage)."""
    L = len(view.tokens)
    peak = None if peaks is None else peaks.get("final")
    start, stop = token_window(L, key, view.final, peak)
    return {
        "rows": {k: v[start:stop] for k, v in view.rows.items()},
        "tokens": view.tokens[start:stop],
        "token_info": view.token_info.iloc[start:stop].reset_index(drop=True),
        "shares": {k: v[start:stop] for k, v in view.shares.items()},
        "offset": start,
        "peaks": peaks,
        "untrained": None if view.dimmed is None else view.dimmed[start:stop],  # grey: not trained
    }


def credit_text(
    view: shared.RolloutView,
    window: dict,
    peak: float,
    selected: int | None,
    key: str,
    turns: list[dict] | None = None,
) -> int | None:
    """The window of the response as running text coloured by its final advantage (hover: the token's
    facts; click: select it), each of `turns` (an agent run's) opened by its role, untrained tokens grey.
    Returns a position clicked in this rerun."""
    start = window["offset"]
    info = window["token_info"]
    facts = [
        f"logprob {fmt.nice(r.logprob)} · entropy {fmt.nice(r.entropy)} · class {r.token_class}"
        for r in info.itertuples(index=False)
    ]
    dimmed = None if view.dimmed is None else view.dimmed[start : start + len(window["tokens"])]
    text = heatmaps.credit_text_html(
        window["tokens"],
        window["rows"]["final"],
        peak,
        offset=start,
        selected=selected,
        facts=facts,
        dimmed=dimmed,
        labels=turn_ui.turn_labels(turns, view.dimmed, start, len(window["tokens"])),
    )

    return widgets.credit_text(text, key=key)


def token_strips(view: shared.RolloutView, window: dict, pos: int | None, key: str) -> None:
    """The per-token strips of the window (logprob, reference, log-ratios, entropy, value, ratio)."""
    start, stop = window["offset"], window["offset"] + len(window["tokens"])
    if not view.strips:
        st.caption(
            "This run stores no per-token logprobs, entropies or values (`creditlens score` fills them)."
        )
        return
    dimmed = None if view.dimmed is None else view.dimmed[start:stop]
    st.plotly_chart(
        strip_figures.token_strips_figure(
            {k: v[start:stop] for k, v in view.strips.items()},
            window["tokens"],
            offset=start,
            dimmed=dimmed,
            highlight=pos,
        ),
        key=key,
        width="stretch",
        config={"displayModeBar": False},
    )
    if view.dimmed is not None:
        st.caption("Faded bars and text: tokens outside the loss mask (kept, never hidden).")
