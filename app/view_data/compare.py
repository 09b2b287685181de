"""The Compare view's numbers: several estimators on one rollout, their rank agreement and credit mass by
token class over the group (of each estimator's A_final by default, as the Explorer's shares)."""

from __future__ import annotations

import numpy as np
import streamlit as st

from app import data
from app.view_data import shared
from backend.credit import credit_shares, token_classes


@st.cache_data(show_spinner=shared.SCOPED_SPINNER, max_entries=64)
def estimator_advantages(db: str, run: str, group: int, estimator: str, config: tuple) -> np.ndarray:
    """A: (B, T) of one estimator on the group (on the channel `config` names), at the estimator's scope."""
    batch = data.group_batch(db, run, group)
    return shared.scoped_advantages(db, run, estimator, config, batch.rollout_ids.tolist(), batch.T).numpy()


@st.cache_data(show_spinner=False, max_entries=32)
def compare(
    db: str,
    run: str,
    group: int,
    rollout_id: int,
    estimators: tuple,
    classes: tuple | None = None,
    credit: str = "final",
    betas: tuple = (),
) -> dict:
    """Compare view numbers: per estimator A on the rollout, rank agreement and credit mass over the group;
    an estimator that cannot run is left out with its error in `errors` (label -> message).

    estimators: ((name, config tuple), ...); labels are the names (with a prime for repeats);
    classes: the token classes of the credit mass (default: the run's saved ones); credit: what the mass
    describes, "final" (each estimator's A_final = Σ_c β_c·Ã_c with it on the outcome channels, β the
    run's or `betas`, as `creditlens explain` gives it) or "channel" (the estimator's A alone, as the rows
    and the rank agreement). Each estimator's A
    comes from its own cache (`estimator_advantages`), so adding one to a comparison computes only that
    one (cached on the whole list, adding a third to the demo's Compare computed or re-read all three)."""
    batch = data.group_batch(db, run, group)
    row = shared.row_of(batch, rollout_id)
    L = int(batch.lengths[row])
    advantages, finals, errors = {}, {}, {}
    for name, config in estimators:
        label = name
        while label in advantages or label in errors:
            label += "′"
        try:
            advantages[label] = estimator_advantages(db, run, group, name, config)  # (B, T)
            if credit == "final":
                finals[label] = shared.group_credit(db, run, group, name, config, betas).final  # (B, T)
        except (ValueError, RuntimeError) as exc:  # BatchError, InputError, bad config: shown in its panel
            advantages.pop(label, None)
            errors[label] = str(exc)
    classes = classes or data.token_classes(db, run)
    class_ids = token_classes.class_ids(batch, classes)
    return {
        "tokens": list(batch.tokens[row])
        if batch.tokens is not None
        else [str(t) for t in batch.token_ids[row, :L].tolist()],
        "rollout": {k: v[row, :L] for k, v in advantages.items()},
        "errors": errors,
        "agreement": credit_shares.rank_agreement(advantages, batch.response_mask),
        "mass": credit_shares.credit_mass_by_class(
            finals if credit == "final" else advantages,
            class_ids,
            batch.response_mask,
            token_classes.names(classes),
        ),
        "classes": token_classes.labels(batch, row, classes),
        "silent": all(not np.any(a) for a in advantages.values()),  # no estimator credits the group
    }
