"""The numbers of runs side by side: several runs' trends (`creditlens trends --run a --run b
[--smooth W]`) and the comparison rows (`creditlens compare-runs`), through the functions those commands
call."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import data
from backend.monitor import compare_runs as run_comparison
from backend.views import compare_runs


@st.cache_data(show_spinner="Computing the runs' trends…", max_entries=16)
def run_trends(db: str, runs: tuple[str, ...], estimator: str | None, credit: str = "final") -> pd.DataFrame:
    """One row per run and step, each run on its own main channel (`creditlens trends --run ... --json`)."""
    return compare_runs.run_trends(data.store_handle(db), list(runs), estimator, {}, None, credit=credit)


def smoothed(frame: pd.DataFrame, weight: float) -> pd.DataFrame:
    """Each run's EMA over steps (`creditlens trends ... --smooth W`)."""
    return compare_runs.smooth(frame, weight)


@st.cache_data(show_spinner="Comparing the runs (their monitors run once)…", max_entries=16)
def comparison(db: str, runs: tuple[str, ...], estimator: str) -> pd.DataFrame:
    """One row per run (`creditlens compare-runs --json`)."""
    return run_comparison.compare_runs(data.store_handle(db), list(runs), estimator)


@st.cache_data(show_spinner="Running the monitors on each run…", max_entries=16)
def run_alerts(db: str, runs: tuple[str, ...], estimator: str) -> pd.DataFrame:
    """Each run's warnings, one row each (`creditlens compare-runs --alerts --json`)."""
    return run_comparison.run_alerts(data.store_handle(db), list(runs), estimator)


@st.cache_data(show_spinner=False, max_entries=16)
def same_prompt(db: str, runs: tuple[str, ...]) -> pd.DataFrame:
    """The groups the runs were asked the same prompt in (`creditlens compare-runs --same-prompt --json`)."""
    return compare_runs.same_prompt(data.store_handle(db), list(runs))


def differing_columns(frame: pd.DataFrame) -> list[str]:
    """The comparison's columns whose values differ between the runs (highlighted)."""
    return compare_runs.differing_columns(frame)
