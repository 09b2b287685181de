"""The Group view's numbers: the group's facts (`creditlens group`), one row of final credit per response of
the group; its prefix tree is `shared.group_tree`."""

from __future__ import annotations

import numpy as np
import streamlit as st

from app import data
from app.view_data import shared
from backend.credit import estimates, main_channel
from backend.views import group_summary, turns


@st.cache_data(show_spinner=False, max_entries=32)
def summary(db: str, run: str, group: int) -> group_summary.GroupSummary:
    """The group's responses, lengths and each channel's scores over them (what `creditlens group` prints)."""
    return group_summary.group_summary(data.store_handle(db), run, group)


@st.cache_data(show_spinner=False, max_entries=32)
def group_rows(
    db: str,
    run: str,
    group: int,
    estimator: str,
    config: tuple,
    betas: tuple = (),
    channel: str | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, list[str]], list[int], dict[str, np.ndarray]]:
    """The Group view's rows: one per response (final A, every channel combined, with `estimator` on
    `channel`; None: the run's main channel), labelled with id and the score R on that channel; and per row
    its untrained tokens (L,) bool (loss mask 0: a tool's output), drawn grey and never coloured."""
    channel = main_channel.resolve(data.store_handle(db), run, channel)
    batch = data.group_batch(db, run, group)
    credit = shared.group_credit(db, run, group, estimator, config, betas, (), channel)
    scores = estimates.with_channel(batch, channel).scores.get(channel)
    values, tokens, ids, untrained = {}, {}, [], {}
    trained = batch.trained_mask.cpu().numpy()
    for i, rid in enumerate(batch.rollout_ids.tolist()):
        L = int(batch.lengths[i])
        score = None if scores is None else main_channel.score_on({channel: float(scores[i])}, channel)
        label = f"#{rid}" + ("" if scores is None else " R=none" if score is None else f" R={score:+.2f}")
        values[label] = credit.final[i, :L]
        tokens[label] = (
            list(batch.tokens[i])
            if batch.tokens is not None
            else [str(t) for t in batch.token_ids[i, :L].tolist()]
        )
        ids.append(int(rid))
        untrained[label] = ~trained[i, :L]
    return values, tokens, ids, untrained


@st.cache_data(show_spinner=False, max_entries=32)
def aligned_turns(db: str, run: str, group: int, estimator: str, config: tuple):
    """The group's responses turn by turn (`creditlens turns --group`), one row a response and one column a
    turn (every role): its role, text and mean final A, or "not trained"; None when no response has more
    than one turn. Cell text is the log's: shown by st.dataframe as plain text."""
    rows = turns.group_turns(data.store_handle(db), run, group, estimator, config)
    if rows.empty or rows["turn"].max() < 2:
        return None

    def cell(r) -> str:
        credit = f"A {r.mean_advantage:+.3f}" if r.trained else "not trained"
        return f"{r.role} · {credit} · {r.text.strip()[:48]!r}"

    rows = rows.assign(cell=[cell(r) for r in rows.itertuples()])
    wide = rows.pivot(index="rollout_id", columns="turn", values="cell").fillna("")
    wide.columns = [f"turn {k}" for k in wide.columns]
    return wide.reset_index()
