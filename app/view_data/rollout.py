"""The Rollout view's own numbers: an estimator's terms for one rollout and every channel's derivation ("why
this credit", what `creditlens explain` prints); its heatmap rows are `shared.rollout_view`."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import streamlit as st

from app import data
from app.view_data.shared import RolloutView
from backend.credit import landed, main_channel
from backend.estimators import registry
from backend.views import explain


@st.cache_data(show_spinner="Collecting the estimator's terms…", max_entries=64)
def terms(
    db: str, run: str, rollout_id: int, estimator: str, config: tuple, channel: str | None = None
) -> dict:
    """The estimator's terms for one rollout at its scope on `channel` (None: the run's main channel), what
    `creditlens explain --json` prints."""
    channel = main_channel.resolve(data.store_handle(db), run, channel)
    built = registry.make_config(estimator, **dict(main_channel.on_channel(estimator, config, channel)))
    return explain.scoped_terms(data.store_handle(db), run, rollout_id, estimator, built)


@st.cache_data(show_spinner="Deriving every channel's term…", max_entries=32)
def explanation(
    db: str,
    run: str,
    rollout_id: int,
    estimator: str,
    config: tuple,
    channel: str | None = None,
    betas: tuple = (),
) -> explain.Explanation:
    """`explain.explain_rollout`, the function behind `creditlens explain` (channel: the one looked at;
    betas: (channel, β) pairs overriding the run's β, as `explain --beta`)."""
    return explain.explain_rollout(
        data.store_handle(db), run, rollout_id, estimator, config, channel, dict(betas) or None
    )


def derivations(explained: explain.Explanation, pos: int) -> dict:
    """At token `pos`: channel -> (contribution, lines) for every channel of A_final, the final's line and the
    what-if on the scores summed first (label, lines) or None, and whether the token is untrained (loss mask
    0); `creditlens explain --pos` prints the same."""
    what = explained.what_if
    return {
        "untrained": explained.untrained_at(pos),  # then every line below is "not trained: A = 0"
        "channels": {
            c: (float(p["contribution"][pos]), explained.channel_derivation(c, pos))
            for c, p in explained.channels.items()
        },
        "final": explained.final_derivation(pos),
        "what_if": None
        if what is None
        else (what["label"], float(what["advantage"][pos]), explained.derivation_at(pos, what["terms"])),
    }


@st.cache_data(show_spinner=False, max_entries=64)
def realized_delta(db: str, run: str, rollout_id: int) -> np.ndarray | None:
    """Δ log π per token after the update that consumed the rollout's step (NaN where untrained), None when
    the store has none: `landed.rollout_delta`, the `delta` of `creditlens landed`."""
    return landed.rollout_delta(data.store_handle(db), run, rollout_id)


def with_realized_row(view: RolloutView, delta: np.ndarray | None) -> RolloutView:
    """The view with the row `landed.REALIZED_ROW` under its credit rows (unchanged without a Δ)."""
    if delta is None or len(delta) != len(view.tokens):
        return view
    return replace(view, rows={**view.rows, landed.REALIZED_ROW: delta})
