"""Cached computations behind the views, keyed on (db, run, group/rollout, estimator, config tuple).

Each function loads its batch through `app.data` and calls a backend function; results are numpy
arrays and DataFrames (cheap to pickle), so a view never recomputes what it already showed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

from app import data
from backend import analysis
from backend.estimators import registry


@dataclass
class RolloutView:
    """Everything the Rollout view draws for one rollout: rows of the heatmap and per-token facts."""

    rollout_id: int
    row: int
    tokens: list[str]
    rows: dict[str, np.ndarray]  # heatmap rows: channel contributions, final, true credit
    contributions: dict[str, np.ndarray]  # channel -> (L,) β_c Ã_c
    final: np.ndarray  # (L,)
    shares: dict[str, np.ndarray]  # channel -> (L,) share of |A| at each token
    token_info: pd.DataFrame  # pos, token, logprob, entropy, value, token_class
    betas: dict[str, float]


def _row_of(batch, rollout_id: int) -> int:
    return int((batch.rollout_ids == int(rollout_id)).nonzero()[0, 0])


@st.cache_data(show_spinner=False, max_entries=64)
def group_credit(db: str, run: str, group: int, estimator: str, config: tuple,
                 betas: tuple = ()) -> analysis.ChannelCredit:
    batch = data.group_batch(db, run, group)
    return analysis.channel_credit(batch, estimator, config, dict(betas) or None)


@st.cache_data(show_spinner=False, max_entries=64)
def rollout_view(db: str, run: str, group: int, rollout_id: int, estimator: str, config: tuple,
                 betas: tuple = ()) -> RolloutView:
    batch = data.group_batch(db, run, group)
    credit = group_credit(db, run, group, estimator, config, betas)
    row = _row_of(batch, rollout_id)
    L = int(batch.lengths[row])
    tokens = list(batch.tokens[row]) if batch.tokens is not None else [str(t) for t in batch.token_ids[row, :L].tolist()]
    contributions = {c: v[row, :L] for c, v in credit.contributions.items()}
    final = credit.final[row, :L]
    rows = dict(contributions)
    rows["final"] = final
    if "true_credit" in batch.extras and batch.extras["true_credit"].dim() == 2:
        rows["true credit"] = batch.extras["true_credit"][row, :L].numpy()

    def per_token(x):
        return np.full(L, np.nan) if x is None else x[row, :L].numpy()

    info = pd.DataFrame({
        "pos": np.arange(L),
        "token": tokens,
        "logprob": per_token(batch.logprobs),
        "entropy": per_token(batch.entropies),
        "value": per_token(batch.values),
        "token_class": analysis.token_class_labels(batch, row),
    })
    return RolloutView(int(rollout_id), row, tokens, rows, contributions, final,
                       analysis.token_shares(contributions), info, credit.betas)


@st.cache_data(show_spinner=False, max_entries=32)
def group_tree(db: str, run: str, group: int, channel: str = "task") -> tuple[analysis.PrefixTree, pd.DataFrame]:
    """The display prefix tree of a group with V(u) in outcome (Z) units."""
    batch = data.group_batch(db, run, group)
    z = registry.estimate("grpo", batch, channel=channel).advantages[:, 0] if batch.T else np.zeros(batch.B)
    lengths = batch.lengths.tolist()
    ids = [batch.token_ids[i, :L].tolist() for i, L in enumerate(lengths)]
    tree = analysis.prefix_tree(ids, z)
    return tree, tree.frame(batch.tokens)


@st.cache_data(show_spinner=False, max_entries=64)
def estimator_advantages(db: str, run: str, group: int, estimator: str, config: tuple) -> np.ndarray:
    """A: (B, T) of one estimator on the group's task channel."""
    batch = data.group_batch(db, run, group)
    return registry.estimate(estimator, batch, **dict(config)).advantages.numpy()
