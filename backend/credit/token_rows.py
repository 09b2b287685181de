"""One row per real token of a run under an estimator: what `creditlens estimate` writes and what the
notebook API's `Run.estimate` returns (the same function, so the two can never disagree). Each row carries
the token's class (the run's token classes, `creditlens token-classes`), so credit can be weighed by class.

`estimate_config` turns an estimator name, `--set` pairs and a channel into the validated config (the
channel defaults to the run's main channel); `token_tables` yields the rows chunk by chunk (Arrow tables
with `TOKEN_ROWS_SCHEMA`), computed at the estimator's scope or read from the store's cache.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from backend.core.batch import RolloutBatch
from backend.core.chunks import DEFAULT_CHUNK_ROLLOUTS
from backend.core.errors import InputError
from backend.core.workers import Workers
from backend.credit import as_trained, credit_summary, estimates, main_channel, token_classes
from backend.estimators import registry
from backend.store import StoreHandle

DICTIONARY_COLUMNS = ["rollout_id", "group_id", "token", "token_class"]
"""Columns whose values repeat (dictionary-encoded in Parquet); ids and advantages vary per token."""
TOKEN_ROWS_SCHEMA = pa.schema(
    [
        ("rollout_id", pa.int64()),
        ("group_id", pa.int64()),
        ("pos", pa.int32()),
        ("token_id", pa.int64()),
        ("token", pa.string()),
        ("token_class", pa.string()),
        ("advantage", pa.float32()),
    ]
)


def estimate_config(
    handle: StoreHandle,
    run: str,
    estimator: str,
    overrides: dict[str, Any],
    channel: str | None = None,
    *,
    set_as: str = "--set",
    channel_as: str = main_channel.CLI_CHANNEL,
) -> tuple[str, Any]:
    """(the estimator's current name, its config) from `--set` pairs and a channel (None: the run's main
    channel; a `channel` in `overrides` wins). Unknown names, channels and values are InputErrors that name
    them as the user wrote them: `set_as` the parameters (`--set`; in Python, keyword arguments),
    `channel_as` the channel (see `main_channel.resolve`)."""
    try:
        spec = registry.get(estimator)
    except registry.UnknownEstimator as exc:
        raise InputError(str(exc)) from None
    overrides = as_trained.trainer_config(handle, run, spec.name, dict(overrides))
    fields = {f.name for f in dataclasses.fields(spec.config_cls)}
    if channel is not None and "channel" not in fields and spec.name not in as_trained.TRAINER_ESTIMATORS:
        raise InputError(f"estimator {spec.name!r} has no channel parameter")
    if "channel" in fields:
        overrides["channel"] = main_channel.resolve(
            handle, run, overrides.get("channel", channel), channel_as
        )
    try:
        return spec.name, registry.make_config(spec.name, **overrides)
    except ValueError as exc:
        raise InputError(f"{set_as}: {exc}") from None


@dataclass
class TokenTables:
    """A run's advantages chunk by chunk (`parts`: (batch, advantages (B, T) float32) pairs, consumed
    once) and how they were obtained; `tables()` turns them into token rows. `notes` fill in as the chunks
    are computed."""

    parts: Iterator[tuple[RolloutBatch, torch.Tensor]]
    how: str  # "cache" or "computed"
    scope: str
    notes: list[str]
    classes: tuple[token_classes.TokenClass, ...] = token_classes.DEFAULT_CLASSES  # the run's

    def tables(self) -> Iterator[pa.Table]:
        for batch, advantages in self.parts:
            yield token_rows(batch, advantages, self.classes)


def token_tables(
    handle: StoreHandle,
    run: str,
    name: str,
    config: Any,
    *,
    chunk_rollouts: int | None = DEFAULT_CHUNK_ROLLOUTS,
    use_cache: bool = True,
    workers: Workers | None = None,
) -> TokenTables:
    """The run's token rows under `name`/`config`. `chunk_rollouts=None` computes the whole run in memory
    at once (the benchmarks' baseline); otherwise the run is streamed at the estimator's scope, its chunks
    computed by `workers` (default: the command's, `backend.core.workers.current`)."""
    with handle.read() as store:
        classes = credit_summary.run_classes(store, run)  # a clear error for an unknown run before any work
    if chunk_rollouts is None:
        scoped = estimates.estimate_rollouts(
            handle, run, name, config, use_cache=use_cache, chunk_rollouts=None
        )
        with handle.read() as store:
            batch = store.load_batch(run)
        parts = iter([(batch, scoped.padded(batch.rollout_ids.tolist(), batch.T))])
        how, scope, notes = scoped.how, scoped.scope, scoped.notes
    else:
        streamed = estimates.stream_run(
            handle,
            run,
            name,
            config,
            chunk_rollouts=chunk_rollouts,
            use_cache=use_cache,
            with_tokens=True,
            workers=workers,
        )
        parts, how, scope, notes = iter(streamed), streamed.how, streamed.scope, streamed.notes
    return TokenTables(parts, how, scope, notes, classes)


def token_rows(
    batch: RolloutBatch,
    advantages: torch.Tensor,
    classes: tuple[token_classes.TokenClass, ...] = token_classes.DEFAULT_CLASSES,
) -> pa.Table:
    """One row per real token of `batch`: rollout_id, group_id, pos, token_id, token, token_class (the first
    of `classes` that matches it, else `other`), advantage. advantages: (B, T) float32, `batch`'s padding."""
    mask = batch.response_mask.cpu().numpy()
    lengths = mask.sum(axis=1)
    n = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    # `pos` is the index among the response's real tokens (the position the store and app use).
    pos = np.arange(n, dtype=np.int64) - np.repeat(starts, lengths)
    if batch.token_text is not None and len(batch.token_text) == n:
        tokens = batch.token_text.cast(pa.string())
    elif batch.tokens is not None:
        flat = [tok for row in batch.tokens for tok in row]
        tokens = pa.array(flat if len(flat) == n else [None] * n, type=pa.string())
    else:
        tokens = pa.nulls(n, type=pa.string())
    return pa.table(
        {
            "rollout_id": pa.array(np.repeat(batch.rollout_ids.cpu().numpy(), lengths), type=pa.int64()),
            "group_id": pa.array(np.repeat(batch.group_ids.cpu().numpy(), lengths), type=pa.int64()),
            "pos": pa.array(pos.astype(np.int32)),
            "token_id": pa.array(batch.token_ids.cpu().numpy()[mask], type=pa.int64()),
            "token": tokens,
            "token_class": pa.array(token_classes.names(classes), pa.string()).take(
                token_classes.flat_class_ids(batch, classes)
            ),
            "advantage": pa.array(advantages.detach().to(torch.float32).cpu().numpy()[mask]),
        },
        schema=TOKEN_ROWS_SCHEMA,
    )
