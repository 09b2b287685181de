"""The Explorer's rollout table (backend.views.explorer: the functions `creditlens rollouts` calls)."""

from __future__ import annotations

import streamlit as st

from app import data
from backend.views import explorer

# Re-exported for the Explorer, which reaches the backend only through app/.
from backend.views.explorer import FLAG_COLUMNS as FLAG_COLUMNS
from backend.views.explorer import ExplorerQuery as ExplorerQuery
from backend.views.explorer import Filter as Filter


@st.cache_data(show_spinner=False, max_entries=64)
def explorer_columns(db: str, run: str, query) -> list[str]:
    return explorer.table_columns(data.store_handle(db), run, query)


@st.cache_data(
    show_spinner="Summarizing the run (first time per estimator: computes it at its scope)…", max_entries=64
)
def explorer_page(db: str, run: str, query) -> explorer.ExplorerPage:
    """One page of the Explorer's rollout table (`query`: a frozen `backend.views.explorer.ExplorerQuery`)."""
    return explorer.rollout_table(data.store_handle(db), run, query)


@st.cache_data(show_spinner=False, max_entries=64)
def explorer_ranges(db: str, run: str, query, columns: tuple[str, ...]) -> dict:
    """min/max over the whole run of the numeric columns the filters offer."""
    return explorer.column_ranges(data.store_handle(db), run, query, list(columns))
