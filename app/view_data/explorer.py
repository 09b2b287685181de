"""The Explorer's rollout table (backend.views.explorer: the functions `creditlens rollouts` calls)."""

from __future__ import annotations

import streamlit as st

from app import data
from backend.credit import as_trained
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


def credit_caption(estimator: str, channel: str, credit: str, tuned: bool = False) -> str:
    """Which credit the share columns describe, in one sentence for the caption above the table (each
    column's definition is its header's help: app/ui/column_help.py); `tuned`: under a tuned β."""
    if credit == "final" and estimator in as_trained.TRAINER_ESTIMATORS:
        of = f"the advantage the trainer trained on ({estimator}: its reward functions' terms summed)"
    elif credit == "final":
        of = (
            f"A_final = Σ_c β_c·Ã_c ({estimator} on the outcome channels{', the tuned β' if tuned else ''}, "
            "as the Rollout view colours)"
        )
    else:
        of = f"{estimator}'s A on the {channel} channel alone"
    return f"Shares (both signs) of {of}; hover a column's header for what it means."


def reading_order(columns: list[str], sort: str | None = None) -> list[str]:
    """The table's columns for reading: the rollout's id and the column sorted by (beside it, wherever it
    sits otherwise), the response, its scores and metrics, then the credit (excess first: sorting by it
    finds credit out of proportion to the text), then the rest."""
    if sort is not None and sort in columns and sort != "rollout_id":
        rest = [c for c in reading_order(columns) if c != sort]
        return [rest[0], sort, *rest[1:]]
    first = ["rollout_id", "preview", "step", "group_id", "length"]
    first += [c for c in ("turns", "assistant_turns", "tool_calls") if c in columns]  # an agent run's
    first += [c for c in columns if c.startswith(("score_", "metric_")) or c == "reward"]
    signed = ("pos_share_", "neg_share_", "excess_pos_", "excess_neg_")
    credit = [c for c in columns if c.startswith("excess_") and not c.startswith(signed)]
    credit += [c for c in columns if c.startswith("share_")]
    credit += [c for c in columns if c.startswith("turn_share_")]  # an agent run's credit by turn
    credit += [c for c in columns if c.startswith(signed)]
    credit += [c for c in ("max_abs", "logged_gap", "spearman") if c in columns]
    return first + credit + [c for c in columns if c not in first and c not in credit]
