"""What several views read: the split-channel credit of a group, one rollout's credit as the Rollout, Tune
and Resample views draw it, the group's prefix tree, the estimators a run cannot run.

Each function calls the backend function a command also calls: estimator outputs come from
`backend.credit.estimates.estimate_rollouts` at the estimator's declared scope (group, step or run) through
the store's cache, so a view shows exactly what `creditlens estimate` / `creditlens explain` print. Results
are numpy arrays and DataFrames (cheap to pickle), so a view never recomputes what it already showed.
Every function is cached on small hashable arguments: (db, run, group/rollout, estimator, config tuple).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import streamlit as st

from app import data
from backend.credit import channel_credit, credit_shares, estimates, main_channel, token_classes

# Re-exported for the views, which reach the backend only through app/ (names, types and cheap helpers).
from backend.credit.credit_shares import credit_difference as credit_difference
from backend.credit.estimates import ALL_CHANNELS as ALL_CHANNELS
from backend.estimators import registry
from backend.views import display_tree, explain, strips

WHAT_IF_ROW = "what-if: all summed"
"""The Rollout view's row of the estimator on the channel scores summed first, shown when the channel looked
at is `all`: a what-if beside A_final (which is always the split channels' sum: a channel picked must not
change the final credit)."""

SCOPED_SPINNER = (
    "Computing credit (an estimator of step or run scope computes its whole step or run once; "
    "the store keeps it)…"
)


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
    strips: dict[str, np.ndarray] = field(default_factory=dict)  # backend.views.strips.token_strips
    dimmed: np.ndarray | None = None  # (L,) bool: outside the stored loss mask


def row_of(batch, rollout_id: int) -> int:
    return int((batch.rollout_ids == int(rollout_id)).nonzero()[0, 0])


@st.cache_data(show_spinner=SCOPED_SPINNER, max_entries=64)
def group_credit(
    db: str,
    run: str,
    group: int,
    estimator: str,
    config: tuple,
    betas: tuple = (),
    norms: tuple = (),
    channel: str | None = None,
) -> channel_credit.ChannelCredit:
    """The group's split-channel credit with `estimator` on `channel` (None: the run's main channel)."""
    _, credit = explain.group_channel_credit(
        data.store_handle(db),
        run,
        group,
        estimator,
        config,
        dict(betas) or None,
        normalizations=dict(norms) or None,
        save=not data.settings().read_only,
        channel=channel,
    )
    return credit


def scoped_advantages(db: str, run: str, name: str, config: tuple, rollout_ids: list[int], T: int):
    """(B, T) advantages of `rollout_ids` under one estimator, at its scope through the store's cache."""
    built = registry.make_config(name, **dict(config))
    scoped = estimates.estimate_rollouts(
        data.store_handle(db), run, name, built, rollout_ids, save=not data.settings().read_only
    )
    return scoped.padded(rollout_ids, T)


@st.cache_data(show_spinner=False, max_entries=64)
def rollout_view(
    db: str,
    run: str,
    group: int,
    rollout_id: int,
    estimator: str,
    config: tuple,
    betas: tuple = (),
    norms: tuple = (),
    classes: tuple | None = None,
    channel: str | None = None,
) -> RolloutView:
    """classes: the token classes that label the tokens (default: the run's saved ones); channel: the one
    looked at (None: the run's main channel); the credit is split whatever it is, and on `all` the row
    `WHAT_IF_ROW` shows the estimator on the scores summed first."""
    batch = data.group_batch(db, run, group)
    credit = group_credit(db, run, group, estimator, config, betas, norms, channel)
    row = row_of(batch, rollout_id)
    L = int(batch.lengths[row])
    tokens = (
        list(batch.tokens[row])
        if batch.tokens is not None
        else [str(t) for t in batch.token_ids[row, :L].tolist()]
    )
    contributions = {c: v[row, :L] for c, v in credit.contributions.items()}
    final = credit.final[row, :L]
    rows = dict(contributions)
    rows["final"] = final
    summed = channel_credit.summed_config(estimator, config)
    resolved = main_channel.resolve(data.store_handle(db), run, dict(config).get("channel", channel))
    if resolved == ALL_CHANNELS and summed and ALL_CHANNELS not in contributions:
        # beside A_final, never in it: the estimator on the scores summed first (what TRL trains on)
        rows[WHAT_IF_ROW] = scoped_advantages(db, run, estimator, summed, [int(rollout_id)], L)[0].numpy()
    if "true_credit" in batch.extras and batch.extras["true_credit"].dim() == 2:
        rows["true credit"] = batch.extras["true_credit"][row, :L].numpy()

    def per_token(x):
        return np.full(L, np.nan) if x is None else x[row, :L].numpy()

    info = pd.DataFrame(
        {
            "pos": np.arange(L),
            "token": tokens,
            "logprob": per_token(batch.logprobs),
            "entropy": per_token(batch.entropies),
            "value": per_token(batch.values),
            "token_class": token_classes.labels(batch, row, classes or data.token_classes(db, run)),
        }
    )
    return RolloutView(
        int(rollout_id),
        row,
        tokens,
        rows,
        contributions,
        final,
        credit_shares.token_shares(contributions),
        info,
        credit.betas,
        strips.token_strips(batch, row),
        _outside_loss_mask(batch, row),
    )


def _outside_loss_mask(batch, row: int) -> np.ndarray | None:
    inside = strips.loss_mask(batch, row)
    return None if inside is None else ~inside


@st.cache_data(show_spinner=False, max_entries=32)
def group_tree(
    db: str, run: str, group: int, channel: str | None = None
) -> tuple[display_tree.PrefixTree, pd.DataFrame]:
    """The display prefix tree of a group with V(u) in outcome (Z) units of `channel` (None: the run's main
    channel)."""
    channel = main_channel.resolve(data.store_handle(db), run, channel)
    batch = estimates.with_channel(data.group_batch(db, run, group), channel)
    z = registry.estimate("grpo", batch, channel=channel).advantages[:, 0] if batch.T else np.zeros(batch.B)
    lengths = batch.lengths.tolist()
    ids = [batch.token_ids[i, :L].tolist() for i, L in enumerate(lengths)]
    tree = display_tree.prefix_tree(ids, z)
    return tree, tree.frame(batch.tokens)


@st.cache_data(show_spinner=False, max_entries=16)
def unavailable(db: str, run: str, group: int) -> dict[str, str]:
    """Estimators that cannot run on this run's data (checked on the group): name -> reason and fix."""
    return registry.unavailable(data.group_batch(db, run, group))
