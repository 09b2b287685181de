"""The Rollout view's cliff-token marker: the first cliff token of the rollout (Cliff Tokens' z-test on
the Monte Carlo teacher's success rates), from `backend.evaluation.cliff_tokens.stored_cliffs`, the function
`creditlens cliff` prints. No math here."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import data, state
from app.ui import panels
from backend.core.errors import InputError
from backend.evaluation import cliff_tokens


@st.cache_data(show_spinner=False, max_entries=64)
def rollout_cliffs(db: str, run: str, rollout_id: int) -> pd.DataFrame:
    """Every valued pair of the rollout with the official test (empty when it has no valued pair)."""
    try:
        return cliff_tokens.stored_cliffs(data.store_handle(db), run, rollout_id)
    except InputError:
        return pd.DataFrame(columns=cliff_tokens.COLUMNS)


def show(db: str, run: str, rollout_id: int, select_key: str, button_key: str) -> int | None:
    """A caption naming the rollout's first cliff token, and a button that selects it (by setting
    `select_key` and rerunning). Returns the cliff token's position, or None."""
    table = rollout_cliffs(db, run, rollout_id)
    if table.empty:
        return None
    first = table[table["first"]]
    if first.empty:
        st.caption(
            f"No cliff token: the Monte Carlo success rate never drops by more than "
            f"{cliff_tokens.DELTA_0:g} + {cliff_tokens.Z_ALPHA:g} se between valued positions "
            f"({len(table)} pairs; Cliff Tokens' test, `creditlens cliff`)."
        )
        return None
    row = first.iloc[0]
    token = int(row["token"])
    where = (
        f"token {token}"
        if int(row["pos"]) - int(row["start"]) == 1
        else f"token {token}, the end of the segment {int(row['start'])}–{token}"
    )
    shown = panels.quoted(str(row.get("token_text", "")))
    text, button = st.columns([5, 1])
    text.caption(
        f"Cliff token (Cliff Tokens, arXiv 2606.25524): {where} {shown} — "
        f"success rate {row['p_prev']:.2f} → {row['p']:.2f} ({int(row['k_prev'])}/{int(row['n_prev'])} → "
        f"{int(row['k'])}/{int(row['n'])} continuations), a drop of {row['drop']:.2f} > "
        f"{row['threshold']:.2f} (δ0 + z·se). `creditlens cliff --run {run} --rollout {rollout_id}`"
    )
    if button.button("Select it", key=button_key):
        st.session_state[select_key] = token
        state.rerun()
    return token
