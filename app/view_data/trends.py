"""The Trends view's table: one row per step (backend.views.explorer.step_trends, what `creditlens trends`
prints)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import data
from backend.views import explorer


@st.cache_data(show_spinner="Computing trends over steps…", max_entries=32)
def trends(
    db: str, run: str, estimator: str | None, config: tuple = (), credit: str = "final", betas: tuple = ()
) -> pd.DataFrame:
    """One row per step (what `creditlens trends` prints); credit: what the class shares describe, A_final
    ("final") or the estimator's output on its channel ("channel"); betas: a tuned β in A_final."""
    return explorer.step_trends(data.store_handle(db), run, estimator, config, credit=credit, betas=betas)
