"""Did the credit land, for the views: the tables of `backend.credit.landed` (what `creditlens landed`
prints), cached per run and credit; None where the run has no realized Δ (no `logprobs_after`, nothing
scored with its after-update checkpoints)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import data
from backend.core.errors import InputError
from backend.credit import landed


@st.cache_data(show_spinner="Comparing the credit with the realized change…", max_entries=32)
def landed_tables(
    db: str, run: str, estimator: str | None, config: tuple = ()
) -> dict[str, pd.DataFrame] | None:
    """{steps, rollouts, classes, classes_by_step} under `estimator` with `config` ((field, value) pairs,
    the channel among them), or None when the run has no realized Δ."""
    handle = data.store_handle(db)
    try:
        tokens = landed.landed_tokens(handle, run, estimator, dict(config))
    except InputError:
        return None
    return {
        "source": tokens.source,
        "estimator": tokens.estimator,
        "steps": landed.by_step(tokens),
        "rollouts": landed.by_rollout(tokens),
        "classes": landed.by_class(tokens),
        "classes_by_step": landed.by_class(tokens, per_step=True),
    }


@st.cache_data(show_spinner="Comparing each estimator's credit with the realized change…", max_entries=16)
def landed_estimators(db: str, run: str, estimators: tuple[str, ...]) -> pd.DataFrame | None:
    """`landed.by_estimator` over `estimators` (their default parameters), None without a realized Δ."""
    try:
        return landed.by_estimator(data.store_handle(db), run, list(estimators))
    except InputError:
        return None
