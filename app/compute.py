"""Cached computations behind the views, keyed on (db, run, group/rollout, estimator, config tuple).

Each function calls the backend function a command also calls: estimator outputs come from
`backend.estimates.estimate_rollouts` at the estimator's declared scope (group, step or run) through the
store's cache, so a view shows exactly what `creditlens estimate` / `creditlens explain` print. Results
are numpy arrays and DataFrames (cheap to pickle), so a view never recomputes what it already showed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from app import data
from backend import (
    channel_credit,
    credit_shares,
    display_tree,
    estimates,
    explain,
    explorer,
    main_channel,
    strips,
    teacher_bench,
    token_classes,
)

# Re-exported for the pages, which reach the backend only through app/ (names, types and cheap helpers).
from backend.credit_shares import credit_difference as credit_difference
from backend.errors import InputError
from backend.estimates import ALL_CHANNELS as ALL_CHANNELS
from backend.estimators import registry
from backend.explorer import FLAG_COLUMNS as FLAG_COLUMNS
from backend.explorer import ExplorerQuery as ExplorerQuery
from backend.explorer import Filter as Filter
from backend.main_channel import on_channel as on_channel
from backend.main_channel import score_on as score_on
from backend.metrics import METRICS as METRICS
from backend.models import engine_note as engine_note
from backend.models import load_engine
from backend.models.loading import check_model_dir
from backend.models.resample import suggested_positions as suggested_positions
from backend.oracle import has_oracle as has_oracle
from backend.oracle import oracle_table

_SCOPED = (
    "Computing credit (an estimator of step or run scope computes its whole step or run once; "
    "the store keeps it)…"
)


@dataclass
class RolloutView:
    """Everything the Rollout view draws for one rollout: rows of the heatmap and per-token facts."""

    rollout_id: int
    row: int
    tokens: list[str]
    rows: dict[str, np.ndarray]  # heatmap rows: channel contributions, final, true credit
    contributions: dict[str, np.ndarray]  # channel -> (L,) β_c Ã_c
    final: np.ndarray  # (L,)
    shares: dict[str, np.ndarray]  # channel -> (L,) share of |A| at each token
    token_info: pd.DataFrame  # pos, token, logprob, entropy, value, token_class
    betas: dict[str, float]
    strips: dict[str, np.ndarray] = field(default_factory=dict)  # backend.strips.token_strips
    dimmed: np.ndarray | None = None  # (L,) bool: outside the stored loss mask


def _row_of(batch, rollout_id: int) -> int:
    return int((batch.rollout_ids == int(rollout_id)).nonzero()[0, 0])


@st.cache_data(show_spinner=_SCOPED, max_entries=64)
def group_credit(
    db: str,
    run: str,
    group: int,
    estimator: str,
    config: tuple,
    betas: tuple = (),
    norms: tuple = (),
    channel: str | None = None,
) -> channel_credit.ChannelCredit:
    """The group's split-channel credit with `estimator` on `channel` (None: the run's main channel)."""
    _, credit = explain.group_channel_credit(
        data.store_handle(db),
        run,
        group,
        estimator,
        config,
        dict(betas) or None,
        normalizations=dict(norms) or None,
        save=not data.settings().read_only,
        channel=channel,
    )
    return credit


@st.cache_data(show_spinner="Collecting the estimator's terms…", max_entries=64)
def terms(
    db: str, run: str, rollout_id: int, estimator: str, config: tuple, channel: str | None = None
) -> dict:
    """The estimator's terms for one rollout at its scope on `channel` (None: the run's main channel), what
    `creditlens explain --json` prints."""
    channel = main_channel.resolve(data.store_handle(db), run, channel)
    built = registry.make_config(estimator, **dict(main_channel.on_channel(estimator, config, channel)))
    return explain.scoped_terms(data.store_handle(db), run, rollout_id, estimator, built)


def _scoped(db: str, run: str, name: str, config: tuple, rollout_ids: list[int], T: int):
    """(B, T) advantages of `rollout_ids` under one estimator, at its scope through the store's cache."""
    built = registry.make_config(name, **dict(config))
    scoped = estimates.estimate_rollouts(
        data.store_handle(db), run, name, built, rollout_ids, save=not data.settings().read_only
    )
    return scoped.padded(rollout_ids, T)


@st.cache_data(show_spinner=False, max_entries=64)
def rollout_view(
    db: str,
    run: str,
    group: int,
    rollout_id: int,
    estimator: str,
    config: tuple,
    betas: tuple = (),
    norms: tuple = (),
    classes: tuple | None = None,
    channel: str | None = None,
) -> RolloutView:
    """classes: the token classes that label the tokens (default: the run's saved ones); channel: the one
    the estimator reads (None: the run's main channel)."""
    batch = data.group_batch(db, run, group)
    credit = group_credit(db, run, group, estimator, config, betas, norms, channel)
    row = _row_of(batch, rollout_id)
    L = int(batch.lengths[row])
    tokens = (
        list(batch.tokens[row])
        if batch.tokens is not None
        else [str(t) for t in batch.token_ids[row, :L].tolist()]
    )
    contributions = {c: v[row, :L] for c, v in credit.contributions.items()}
    final = credit.final[row, :L]
    rows = dict(contributions)
    rows["final"] = final
    if "true_credit" in batch.extras and batch.extras["true_credit"].dim() == 2:
        rows["true credit"] = batch.extras["true_credit"][row, :L].numpy()

    def per_token(x):
        return np.full(L, np.nan) if x is None else x[row, :L].numpy()

    info = pd.DataFrame(
        {
            "pos": np.arange(L),
            "token": tokens,
            "logprob": per_token(batch.logprobs),
            "entropy": per_token(batch.entropies),
            "value": per_token(batch.values),
            "token_class": token_classes.labels(batch, row, classes or data.token_classes(db, run)),
        }
    )
    return RolloutView(
        int(rollout_id),
        row,
        tokens,
        rows,
        contributions,
        final,
        credit_shares.token_shares(contributions),
        info,
        credit.betas,
        strips.token_strips(batch, row),
        _outside_loss_mask(batch, row),
    )


def _outside_loss_mask(batch, row: int) -> np.ndarray | None:
    inside = strips.loss_mask(batch, row)
    return None if inside is None else ~inside


@st.cache_data(show_spinner=False, max_entries=32)
def group_tree(
    db: str, run: str, group: int, channel: str | None = None
) -> tuple[display_tree.PrefixTree, pd.DataFrame]:
    """The display prefix tree of a group with V(u) in outcome (Z) units of `channel` (None: the run's main
    channel)."""
    channel = main_channel.resolve(data.store_handle(db), run, channel)
    batch = estimates.with_channel(data.group_batch(db, run, group), channel)
    z = registry.estimate("grpo", batch, channel=channel).advantages[:, 0] if batch.T else np.zeros(batch.B)
    lengths = batch.lengths.tolist()
    ids = [batch.token_ids[i, :L].tolist() for i, L in enumerate(lengths)]
    tree = display_tree.prefix_tree(ids, z)
    return tree, tree.frame(batch.tokens)


@st.cache_data(show_spinner=False, max_entries=16)
def unavailable(db: str, run: str, group: int) -> dict[str, str]:
    """Estimators that cannot run on this run's data (checked on the group): name -> reason and fix."""
    return registry.unavailable(data.group_batch(db, run, group))


@st.cache_data(show_spinner=_SCOPED, max_entries=64)
def estimator_advantages(db: str, run: str, group: int, estimator: str, config: tuple) -> np.ndarray:
    """A: (B, T) of one estimator on the group (on the channel `config` names), at the estimator's scope."""
    batch = data.group_batch(db, run, group)
    return _scoped(db, run, estimator, config, batch.rollout_ids.tolist(), batch.T).numpy()


@st.cache_data(show_spinner=False, max_entries=32)
def group_rows(
    db: str,
    run: str,
    group: int,
    estimator: str,
    config: tuple,
    betas: tuple = (),
    channel: str | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, list[str]], list[int]]:
    """The Group view's rows: one per response (final A, every channel combined, with `estimator` on
    `channel`; None: the run's main channel), labelled with id and the score R on that channel."""
    channel = main_channel.resolve(data.store_handle(db), run, channel)
    batch = data.group_batch(db, run, group)
    credit = group_credit(db, run, group, estimator, config, betas, (), channel)
    scores = estimates.with_channel(batch, channel).scores.get(channel)
    values, tokens, ids = {}, {}, []
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
    return values, tokens, ids


@st.cache_data(show_spinner=False, max_entries=32)
def compare(
    db: str, run: str, group: int, rollout_id: int, estimators: tuple, classes: tuple | None = None
) -> dict:
    """Compare view numbers: per estimator A on the rollout, rank agreement and credit mass over the group;
    an estimator that cannot run is left out with its error in `errors` (label -> message).

    estimators: ((name, config tuple), ...); labels are the names (with a prime for repeats);
    classes: the token classes of the credit mass (default: the run's saved ones). Each estimator's A
    comes from its own cache (`estimator_advantages`), so adding one to a comparison computes only that
    one (cached on the whole list, adding a third to the demo's Compare computed or re-read all three)."""
    batch = data.group_batch(db, run, group)
    row = _row_of(batch, rollout_id)
    L = int(batch.lengths[row])
    advantages, errors = {}, {}
    for name, config in estimators:
        label = name
        while label in advantages or label in errors:
            label += "′"
        try:
            advantages[label] = estimator_advantages(db, run, group, name, config)  # (B, T)
        except (ValueError, RuntimeError) as exc:  # BatchError, InputError, bad config: shown in its panel
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
            advantages, class_ids, batch.response_mask, token_classes.names(classes)
        ),
        "classes": token_classes.labels(batch, row, classes),
    }


@st.cache_data(show_spinner=_SCOPED, max_entries=32)
def summed_reward_credit(
    db: str, run: str, group: int, rollout_id: int, estimator: str, config: tuple
) -> np.ndarray:
    """(L,) A of one rollout under `estimator` on the channel scores summed per rollout first (the mixed
    pipeline, TRL's combined reward), at the estimator's scope: `creditlens estimate --channel all`."""
    if not any(f["name"] == "channel" for f in registry.config_schema(estimator)["fields"]):
        raise ValueError(f"{estimator} reads no reward channel, so it has no summed-reward baseline")
    summed = tuple(sorted({**dict(config), "channel": estimates.ALL_CHANNELS}.items()))
    batch = data.group_batch(db, run, group)
    L = int(batch.lengths[_row_of(batch, rollout_id)])
    return _scoped(db, run, estimator, summed, [int(rollout_id)], L)[0].numpy()


def _specs(db: str, run: str, group: int, channel: str | None) -> dict:
    """The group's default channel specs with the estimator on `channel` (None: the run's main channel)."""
    channel = main_channel.resolve(data.store_handle(db), run, channel)
    return channel_credit.channel_specs(data.group_batch(db, run, group), channel=channel)


@st.cache_data(show_spinner=False, max_entries=16)
def default_betas(db: str, run: str, group: int, channel: str | None = None) -> dict[str, float]:
    return {c: s.beta for c, s in _specs(db, run, group, channel).items()}


@st.cache_data(show_spinner=False, max_entries=16)
def default_normalizations(db: str, run: str, group: int, channel: str | None = None) -> dict[str, str]:
    return {c: s.normalization for c, s in _specs(db, run, group, channel).items()}


@st.cache_data(show_spinner=False, max_entries=64)
def group_shares(
    db: str,
    run: str,
    group: int,
    estimator: str,
    config: tuple,
    betas: tuple,
    norms: tuple = (),
    channel: str | None = None,
) -> dict[str, float]:
    credit = group_credit(db, run, group, estimator, config, betas, norms, channel)
    return credit_shares.abs_shares(credit.contributions)


@st.cache_data(show_spinner=False, max_entries=64)
def dual_ascent(db: str, run: str, tau: tuple, eta: float, beta0: tuple, mode: str) -> pd.DataFrame:
    return channel_credit.dual_ascent_replay(
        data.step_channel_means(db, run), dict(tau), eta, dict(beta0), mode, priority=tuple(c for c, _ in tau)
    )


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


# ---- the run explorer and trends (backend.explorer: the functions `creditlens rollouts/trends` call) ----


@st.cache_data(
    show_spinner="Summarizing the run (first time per estimator: computes it at its scope)…", max_entries=64
)
def explorer_page(db: str, run: str, query) -> explorer.ExplorerPage:
    """One page of the Explorer's rollout table (`query`: a frozen `backend.explorer.ExplorerQuery`)."""
    return explorer.rollout_table(data.store_handle(db), run, query)


@st.cache_data(show_spinner=False, max_entries=64)
def explorer_ranges(db: str, run: str, query, columns: tuple[str, ...]) -> dict:
    """min/max over the whole run of the numeric columns the filters offer."""
    return explorer.column_ranges(data.store_handle(db), run, query, list(columns))


@st.cache_data(show_spinner="Computing trends over steps…", max_entries=32)
def trends(db: str, run: str, estimator: str | None, config: tuple = ()) -> pd.DataFrame:
    """One row per step (what `creditlens trends` prints)."""
    return explorer.step_trends(data.store_handle(db), run, estimator, config)


@st.cache_data(show_spinner=False, max_entries=64)
def explorer_columns(db: str, run: str, query) -> list[str]:
    return explorer.table_columns(data.store_handle(db), run, query)
