"""The Rollout view's attribution: whose credit moved the selected token (`creditlens attribution`)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from app import data
from backend.views.attribution import Attribution, attribute


@st.cache_data(show_spinner=False, max_entries=16)
def attribution(db: str, run: str, rollout: int, pos: int, scope: str) -> Attribution:
    """The shares of every token of the group (or step) in the change of token `pos`, with the rollout's
    step checkpoint: the function `creditlens attribution` calls, cached per request in this process."""
    return attribute(data.store_handle(db), run, rollout, pos, scope=scope)


def heatmap_rows(
    result: Attribution, leave_out_self: bool = False
) -> tuple[dict[str, np.ndarray], dict[str, list[str]], dict[str, np.ndarray]]:
    """One row per response of the result: (label -> shares (L,), label -> token texts, label -> untrained
    (L,) bool). Labels name the rollout and its mean credit over its trained tokens (an outcome advantage's
    one number); the selected rollout's says so. `leave_out_self`: the selected token's own share
    (⟨∇t, ∇t⟩ > 0, often the largest) is left blank, so the colours show the others'."""
    values, tokens, untrained = {}, {}, {}
    for rollout_id, frame in result.shares.groupby("rollout_id", sort=False):
        trained = frame["trained"].to_numpy(bool)
        credit = frame["advantage"].to_numpy()[trained]
        label = f"#{rollout_id}" + (f" Ā={credit.mean():+.2f}" if len(credit) else "")
        if int(rollout_id) == result.rollout:
            label += " (selected)"
        shares = frame["share"].to_numpy(dtype=float).copy()
        if leave_out_self and int(rollout_id) == result.rollout:
            shares[result.pos] = np.nan
        values[label] = shares
        tokens[label] = [str(t) for t in frame["token"]]
        untrained[label] = ~trained
    return values, tokens, untrained
