"""The Group view's numbers: the group's facts (`creditlens group`), one row of final credit per response of
the group; its prefix tree is `shared.group_tree`."""

from __future__ import annotations

import numpy as np
import streamlit as st

from app import data
from app.view_data import shared
from backend.credit import estimates, main_channel
from backend.views import group_summary


@st.cache_data(show_spinner=False, max_entries=32)
def summary(db: str, run: str, group: int) -> group_summary.GroupSummary:
    """The group's responses, lengths and each channel's scores over them (what `creditlens group` prints)."""
    return group_summary.group_summary(data.store_handle(db), run, group)


@st.cache_data(show_spinner=False, max_entries=32)
def group_rows(
    db: str,
    run: str,
    group: int,
    estimator: str,
    config: tuple,
    betas: tuple = (),
    channel: str | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, list[str]], list[int]]:
    """The Group view's rows: one per response (final A, every channel combined, with `estimator` on
    `channel`; None: the run's main channel), labelled with id and the score R on that channel."""
    channel = main_channel.resolve(data.store_handle(db), run, channel)
    batch = data.group_batch(db, run, group)
    credit = shared.group_credit(db, run, group, estimator, config, betas, (), channel)
    scores = estimates.with_channel(batch, channel).scores.get(channel)
    values, tokens, ids = {}, {}, []
    for i, rid in enumerate(batch.rollout_ids.tolist()):
        L = int(batch.lengths[i])
        score = None if scores is None else main_channel.score_on({channel: float(scores[i])}, channel)
        label = f"#{rid}" + ("" if scores is None else " R=none" if score is None else f" R={score:+.2f}")
        values[label] = credit.final[i, :L]
        tokens[label] = (
            list(batch.tokens[i])
            if batch.tokens is not None
            else [str(t) for t in batch.token_ids[i, :L].tolist()]
        )
        ids.append(int(rid))
    return values, tokens, ids
