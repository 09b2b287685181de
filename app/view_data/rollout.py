"""The Rollout view's own numbers: an estimator's terms for one rollout ("why this credit"); its heatmap rows
are `shared.rollout_view`."""

from __future__ import annotations

import streamlit as st

from app import data
from backend.credit import main_channel
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
