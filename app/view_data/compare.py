"""The Compare view's numbers: several estimators on one rollout, all read as one credit (the final A or a
channel's term of it, `backend.views.compare.credit_choices`): their rows, rank agreement and signed credit
mass by token class over the group, as `creditlens compare` prints them."""

from __future__ import annotations

import streamlit as st

from app import data
from app.view_data import shared
from backend.views import compare as compare_view

FINAL = compare_view.FINAL


@st.cache_data(show_spinner=False, max_entries=32)
def credit_choices(db: str, run: str, group: int) -> dict[str, tuple[str, str]]:
    """The credits Compare offers on this run, key -> (label, help), the final A first (one list, in the
    backend, that `creditlens compare --credit` reads too)."""
    return {c.key: (c.label, c.help) for c in compare_view.credit_choices(data.group_batch(db, run, group))}


@st.cache_data(show_spinner=False, max_entries=32)
def compare(
    db: str,
    run: str,
    group: int,
    rollout_id: int,
    estimators: tuple,
    classes: tuple | None = None,
    credit: str = FINAL,
    betas: tuple = (),
) -> dict:
    """Compare view numbers (`backend.views.compare.compare_numbers`): per estimator the chosen credit on
    the rollout, its untrained tokens, rank agreement and signed mass over the group; an estimator that
    cannot run is left out with its error in `errors` (label -> message).

    estimators: ((name, config tuple), ...); labels are the names (with a prime for repeats); classes: the
    token classes of the mass (default: the run's saved ones); credit: a key of `credit_choices`; betas:
    the tuned β, in every A_final. Each estimator's credit comes from its own cache (`shared.group_credit`),
    so adding one to a comparison computes only that one."""
    batch = data.group_batch(db, run, group)
    ids = batch.rollout_ids.tolist()
    arrays, errors = {}, {}
    for name, config in estimators:
        label = compare_view.unique_label(name, [*arrays, *errors])
        try:
            if credit == compare_view.SUMMED:
                summed = compare_view.summed_config(name, config)
                arrays[label] = shared.scoped_advantages(db, run, name, summed, ids, batch.T).numpy()
            else:
                channel = compare_view.config_channel(credit, config, batch)
                own = shared.group_credit(db, run, group, name, config, betas, (), channel)
                arrays[label] = compare_view.chosen_credit(own, credit)  # (B, T)
        except (ValueError, RuntimeError) as exc:  # BatchError, InputError, bad config: shown in its panel
            errors[label] = str(exc)
    classes = classes or data.token_classes(db, run)
    return compare_view.compare_numbers(batch, rollout_id, arrays, credit, classes, errors)
