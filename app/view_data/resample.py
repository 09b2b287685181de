"""The Resample view's model: one loaded engine per model folder, or why the run's model cannot be loaded."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from backend.core.errors import InputError

# Re-exported for the Resample view, which reaches the backend only through app/.
from backend.credit.main_channel import score_on as score_on
from backend.models import engine_note as engine_note
from backend.models import load_engine
from backend.models.agent_resample import playable_positions
from backend.models.environments import run_environment
from backend.models.loading import check_model_dir
from backend.models.resample import suggested_positions as suggested_positions


@st.cache_resource(show_spinner="Loading the model…", max_entries=2)
def engine(model_dir: str, engine_name: str = "auto"):
    """One loaded engine per (model folder, engine) and process."""
    return load_engine(model_dir, engine=engine_name)


def model_folder_problem(model_dir: str | None) -> str | None:
    """Why the run's recorded model folder cannot be loaded here (missing, no config, no weights), or None:
    the views show it in place instead of stopping."""
    if not model_dir:
        return "This run has no model recorded (it was imported without a model folder)."
    if not Path(model_dir).expanduser().is_dir():
        return (
            f"The run's model folder {model_dir!r} does not exist on this machine (it is the folder "
            "recorded when the run was imported). Import the run again with a model folder that exists "
            "here."
        )
    try:
        check_model_dir(model_dir)
    except InputError as exc:
        return f"The run's model cannot be loaded here: {exc}."
    return None


def environment(info: dict):
    """The run's environment (`backend.models.environments`: an agent run's suffixes then go through its
    tool loop), or None; a name that does not load is None with the reason, said in place by the view."""
    try:
        return run_environment(info), None
    except InputError as exc:
        return None, f"The run's environment does not load here ({exc}); resampling uses the policy alone."


def suggested(kind: str, record: dict, tokens: list[str], entropies, k: int, environment) -> list[int]:
    """The view's suggested positions (`suggested_positions`) that can be resampled on this rollout: on an
    agent rollout, none inside a tool's output (and without an environment, none before a tool's answer)."""
    positions = suggested_positions(kind, tokens, entropies, k)
    if not record.get("turns") and record.get("loss_mask") is None:
        return positions
    return playable_positions(positions, record, environment is not None)
