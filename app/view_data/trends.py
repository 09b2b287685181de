"""The Trends view's table: one row per step (backend.views.explorer.step_trends, what `creditlens trends`
prints)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import data
from backend.views import explorer, turns
from backend.views import reward_histogram as histogram


@st.cache_data(show_spinner="Computing trends over steps…", max_entries=32)
def trends(
    db: str, run: str, estimator: str | None, config: tuple = (), credit: str = "final", betas: tuple = ()
) -> pd.DataFrame:
    """One row per step (what `creditlens trends` prints); credit: what the class shares describe, A_final
    ("final") or the estimator's output on its channel ("channel"); betas: a tuned β in A_final."""
    return explorer.step_trends(data.store_handle(db), run, estimator, config, credit=credit, betas=betas)


@st.cache_data(show_spinner=False, max_entries=16)
def reward_histogram(db: str, run: str) -> pd.DataFrame:
    """The reward of each step as a histogram (`creditlens histogram`), each bin with its Explorer filter."""
    return histogram.reward_histogram(data.store_handle(db), run)


@st.cache_data(show_spinner="Computing the credit by turn…", max_entries=16)
def turn_shares(db: str, run: str, estimator: str, config: tuple = ()) -> pd.DataFrame:
    """An agent run's share of the final credit per step and assistant turn index (`creditlens turns`);
    no rows for a run without turns."""
    return turns.turn_shares(data.store_handle(db), run, estimator, config)


def turn_share_columns(shares: pd.DataFrame) -> pd.DataFrame:
    """The shares one column a turn index (`turn_<k>`), one row a step: what `charts.trend_lines` draws."""
    wide = shares.pivot(index="step", columns="turn", values="share")
    wide.columns = [f"turn_{k}" for k in wide.columns]
    return wide.reset_index()
