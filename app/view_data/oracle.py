"""The Oracle view's tables: estimators against the true credit of a synthetic run, and against the Monte
Carlo teacher of a real one."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import data
from backend.core.errors import InputError
from backend.evaluation import teacher_bench

# Re-exported for the Oracle view, which reaches the backend only through app/.
from backend.evaluation.metrics import METRICS as METRICS
from backend.evaluation.oracle import has_oracle as has_oracle
from backend.evaluation.oracle import oracle_table


@st.cache_data(show_spinner="Scoring estimators against the oracle…", max_entries=16)
def oracle(db: str, run: str, estimators: tuple) -> tuple[pd.DataFrame, list[str]]:
    return oracle_table(data.run_batch(db, run), list(estimators))


@st.cache_data(show_spinner="Ranking estimators against the Monte Carlo teacher…", max_entries=16)
def teacher(db: str, run: str, estimators: tuple, channel: str | None = None):
    """The teacher-bench result (what `creditlens teacher-bench` prints) for the chosen estimators on
    `channel` (None: the run's main channel), or None when the run has no Monte Carlo values."""
    try:
        return teacher_bench.teacher_bench(
            data.store_handle(db), run, teacher_bench.parse_estimator_specs(list(estimators)), channel
        )
    except InputError:
        return None
