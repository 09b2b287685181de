"""The Tune view's numbers: the default β and normalizations of a group's channels, the shares of |A| per
channel under chosen β, the summed-reward baseline, and β/τ on the whole run (`backend.views.tune`, the
numbers of `creditlens tune`): thresholds, the replay of dual ascent over the run's steps, a β's effect."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from app import data
from app.view_data import shared
from backend.credit import channel_credit, credit_shares, estimates, main_channel
from backend.estimators import registry
from backend.views import tune as tuning


@st.cache_data(show_spinner=shared.SCOPED_SPINNER, max_entries=32)
def summed_reward_credit(
    db: str, run: str, group: int, rollout_id: int, estimator: str, config: tuple
) -> np.ndarray:
    """(L,) A of one rollout under `estimator` on the channel scores summed per rollout first (the mixed
    pipeline, TRL's combined reward), at the estimator's scope: `creditlens estimate --channel all`."""
    if not any(f["name"] == "channel" for f in registry.config_schema(estimator)["fields"]):
        raise ValueError(f"{estimator} reads no reward channel, so it has no summed-reward baseline")
    summed = tuple(sorted({**dict(config), "channel": estimates.ALL_CHANNELS}.items()))
    batch = data.group_batch(db, run, group)
    L = int(batch.lengths[shared.row_of(batch, rollout_id)])
    return shared.scoped_advantages(db, run, estimator, summed, [int(rollout_id)], L)[0].numpy()


def _specs(db: str, run: str, group: int, channel: str | None) -> dict:
    """The group's default channel specs with the estimator on `channel` (None: the run's main channel)."""
    channel = main_channel.resolve(data.store_handle(db), run, channel)
    return channel_credit.channel_specs(data.group_batch(db, run, group), channel=channel)


@st.cache_data(show_spinner=False, max_entries=16)
def default_betas(db: str, run: str, group: int, channel: str | None = None) -> dict[str, float]:
    return {c: s.beta for c, s in _specs(db, run, group, channel).items()}


@st.cache_data(show_spinner=False, max_entries=16)
def default_normalizations(db: str, run: str, group: int, channel: str | None = None) -> dict[str, str]:
    return {c: s.normalization for c, s in _specs(db, run, group, channel).items()}


@st.cache_data(show_spinner=False, max_entries=64)
def group_shares(
    db: str,
    run: str,
    group: int,
    estimator: str,
    config: tuple,
    betas: tuple,
    norms: tuple = (),
    channel: str | None = None,
) -> dict[str, float]:
    credit = shared.group_credit(db, run, group, estimator, config, betas, norms, channel)
    return credit_shares.abs_shares(credit.contributions)


@st.cache_data(show_spinner=False, max_entries=16)
def thresholds(db: str, run: str) -> dict[str, tuning.Threshold]:
    """Every scored channel's default violation threshold (`creditlens tune` prints them)."""
    return tuning.thresholds(data.store_handle(db), run)


@st.cache_data(show_spinner=False, max_entries=16)
def constrained(db: str, run: str, channel: str | None) -> list[str]:
    """The channels a τ can constrain on `channel`: those with a β of their own."""
    return tuning.constrained(data.store_handle(db), run, channel)


@st.cache_data(show_spinner=False, max_entries=64)
def dual_ascent(
    db: str, run: str, tau: tuple, eta: float, beta0: tuple, mode: str, violation: tuple = ()
) -> pd.DataFrame:
    """The replay `creditlens tune` prints: rows (step, channel, violation_rate, beta, tau, threshold, n)."""
    return tuning.replay(data.store_handle(db), run, dict(tau), eta, dict(beta0), mode, dict(violation))


@st.cache_data(show_spinner=shared.SCOPED_SPINNER, max_entries=16)
def run_effect(
    db: str, run: str, estimator: str, config: tuple, channel: str | None, after: tuple, norms: tuple = ()
) -> pd.DataFrame:
    """The effect of β `after` on the whole run against the default β (`creditlens tune`'s `effect`)."""
    return tuning.run_effect(
        data.store_handle(db), run, estimator, config, channel, dict(after), dict(norms) or None
    )
