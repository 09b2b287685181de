"""The `channel_takeover` monitor's statistic: each reward channel's share of Σ|β_c·Ã_c| per step, and per
rollout, from the split-channel credit (`backend.credit.channel_credit`, the Tune view's numbers) with the
estimator on the chosen channel. On `all` (the channel scores summed per rollout: one channel) it reads the
split channels instead, each reward channel by itself with the estimator (`SPLIT`), so a two-reward run
whose main channel is `all` is watched too.

It is the one statistic that needs every token's credit, so it is computed once per run and estimator key
(`rollout_magnitudes`: Σ_t|β_c·Ã_c| per rollout and channel, one step in memory at a time) and kept in the
store's `channel_summary` (migration 011; dropped with the run's estimates whenever its inputs change);
every later call is SQL over those rows (`stored_step_shares`). `channel_step_shares` is the in-memory
reference the stored path is tested against, and what the monitors fall back to when the store cannot be
written.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from backend.core.batch_fields import ALL_CHANNELS
from backend.core.errors import StoreError
from backend.credit import channel_credit, credit_shares
from backend.estimators import registry
from backend.store import Store, StoreHandle
from backend.store import monitor_queries as queries
from backend.store.monitor_queries import ChannelKey

SPLIT = "all:split"
"""The channel the statistic reads on `all`: every reward channel by itself (`split_channel_credit`); the
stored summaries' key names it, so a summary kept before `all` was split is never read as this one."""


def takeover_channel(store: Store, run: str, channel: str) -> str:
    """The channel `channel_takeover` reads when the monitors run on `channel`: `SPLIT` on the summed `all`
    (unless the run scores a channel literally named all), else `channel`."""
    if channel == ALL_CHANNELS and ALL_CHANNELS not in store.channels_of(store.run_id(run)):
        return SPLIT
    return channel


def channel_key(estimator: str, config: tuple, channel: str, groups_per_step: int) -> ChannelKey:
    """The summary key of `estimator` with `config` (its (key, value) pairs) on `channel`."""
    built = registry.make_config(estimator, **dict(config))
    return ChannelKey(estimator, registry.config_hash(estimator, built), channel, int(groups_per_step))


def _step_credits(
    store: Store,
    run: str,
    estimator: str,
    config: tuple,
    channel: str,
    groups_per_step: int,
    steps: set[int] | None = None,
):
    """(step, rollout ids (B,), channel -> (B,) float64 Σ_t|β_c·Ã_c|) per step (of `steps` when given), the
    estimator run on one step at a time (its true number for group- and step-scoped estimators);
    groups_per_step > 0 reads only the step's first that many groups (by group id)."""
    built = registry.make_config(estimator, **dict(config))
    needs = registry.fields_for(estimator, built)
    fields = None if needs is None else needs | {"token_rewards", "logprobs", "ref_logprobs"}
    for step, group_ids in queries.step_groups(store, store.run_id(run), groups_per_step).items():
        if steps is not None and step not in steps:
            continue
        batch = store.load_batch(run, group_ids=group_ids, fields=fields)
        if channel == SPLIT:
            credit = channel_credit.split_channel_credit(batch, estimator, config)
        else:
            credit = channel_credit.channel_credit(batch, estimator, config, channel=channel)
        yield step, batch.rollout_ids.cpu().numpy(), credit.contributions


def channel_step_shares(
    handle: StoreHandle, run: str, estimator: str, config: tuple, channel: str, groups_per_step: int = 0
) -> tuple[pd.DataFrame, dict[int, pd.DataFrame]]:
    """The reference: per step, each channel's share of Σ|β_c·Ã_c| over the step's tokens
    (`credit_shares.abs_shares` of the split-channel contributions), and per step the rollouts' own shares
    (rows indexed by rollout id, a column per channel), all from the tokens. groups_per_step > 0 reads only
    each step's first that many groups: the split-channel credit of every token is the monitors' one cost
    that grows with the run's tokens (docs/monitors.md has the figures)."""
    rows, per_rollout = [], {}
    with handle.read() as store:  # one connection: opening one per step cost more than the reads
        for step, rollout_ids, contributions in _step_credits(
            store, run, estimator, config, channel, groups_per_step
        ):
            rows.append({"step": step, **credit_shares.abs_shares(contributions)})
            magnitude = pd.DataFrame(
                {c: np.abs(v).sum(axis=1) for c, v in contributions.items()}, index=rollout_ids
            )  # (B, C)
            total = magnitude.sum(axis=1).replace(0.0, np.nan)
            per_rollout[step] = magnitude.div(total, axis=0)
    return pd.DataFrame(rows), per_rollout


def rollout_magnitudes(
    store: Store,
    run: str,
    estimator: str,
    config: tuple,
    channel: str,
    groups_per_step: int,
    steps: set[int] | None = None,
) -> pa.Table:
    """The rows of the channel summary: rollout_id, part_index, part, magnitude (Σ_t|β_c·Ã_c| in float64
    over the rollout's tokens, channel `part` the `part_index`-th of the split-channel credit), of `steps`
    when given."""
    parts = []
    for _, rollout_ids, contributions in _step_credits(
        store, run, estimator, config, channel, groups_per_step, steps
    ):
        for index, (name, values) in enumerate(contributions.items()):
            parts.append(
                pa.table(
                    {
                        "rollout_id": pa.array(rollout_ids.astype(np.int32)),
                        "part_index": pa.array(np.full(len(rollout_ids), index, dtype=np.int32)),
                        "part": pa.array([name] * len(rollout_ids), pa.string()),
                        "magnitude": pa.array(np.abs(values.astype(np.float64)).sum(axis=1)),  # (B,)
                    }
                )
            )
    return pa.concat_tables(parts) if parts else pa.table({"rollout_id": pa.array([], pa.int32())})


def read_step_shares(
    store: Store, run_id: int, key: ChannelKey
) -> tuple[pd.DataFrame, dict[int, pd.DataFrame]] | None:
    """`channel_step_shares`'s two results from the stored summary under `key`; None when it lacks a step
    of the run (not stored yet, or the run grew)."""
    have = queries.channel_summary_steps(store, run_id, key)
    if not have or have != set(queries.step_groups(store, run_id)):
        return None
    long = queries.step_channel_shares(store, run_id, key)
    parts = list(dict.fromkeys(long.sort_values("part_index", kind="stable")["part"]))
    shares = long.pivot(index="step", columns="part", values="share").reindex(columns=parts)
    shares = shares.astype(np.float64).rename_axis(columns=None).reset_index().astype({"step": np.int64})
    magnitudes = (
        queries.channel_magnitudes(store, run_id, key)
        .pivot(index=["step", "rollout_id"], columns="part", values="magnitude")
        .reindex(columns=parts)
    )  # (N, C)
    rollout_shares = magnitudes.div(magnitudes.sum(axis=1).replace(0.0, np.nan), axis=0)
    rollout_shares = rollout_shares.rename_axis(columns=None)
    per_rollout = {}
    for step, frame in rollout_shares.groupby(level="step", sort=True):
        per_rollout[int(step)] = frame.set_axis(
            frame.index.get_level_values("rollout_id").astype(np.int64).rename(None)
        )
    return shares, per_rollout


def stored_step_shares(
    handle: StoreHandle, run: str, estimator: str, config: tuple, channel: str, groups_per_step: int = 0
) -> tuple[pd.DataFrame, dict[int, pd.DataFrame]]:
    """`channel_step_shares` from the store's channel summary, computed and saved first when the store lacks
    it (only the steps it lacks: a run that grew by a step costs that step); when the store cannot be written
    (another process writing, a read-only file) the reference's numbers, computed in memory."""
    key = channel_key(estimator, config, channel, groups_per_step)
    with handle.read() as store:
        run_id = store.run_id(run)
        found = read_step_shares(store, run_id, key)
        if found is not None:
            return found
        missing = set(queries.step_groups(store, run_id)) - queries.channel_summary_steps(store, run_id, key)
        rows = rollout_magnitudes(store, run, estimator, config, channel, groups_per_step, missing)
    if rows.num_rows == 0:  # a run without steps: nothing to store
        return pd.DataFrame(), {}
    try:
        with handle.write() as store, store.transaction():
            queries.save_channel_summary(store, run_id, key, rows)
    except StoreError:
        return channel_step_shares(handle, run, estimator, config, channel, groups_per_step)
    with handle.read() as store:
        return read_step_shares(store, run_id, key)
