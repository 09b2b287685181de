"""Estimator outputs at the scope each estimator declares, through the store's cache: the one truth.

`creditlens estimate`, `creditlens explain` and every view get their advantages from `estimate_rollouts`,
so a view can never show a number the command line does not. The scope (registry.SCOPES) decides which
batch a rollout's advantages are computed on:

- group: the rollout's group (every outcome-relative estimator); a view computes just that group;
- step: the rollout's training step (batch statistics: quantiles, batch mean entropy, Dr. GRPO's B);
- run: the whole run (models fitted on the run: token_rm, rudder, gae with the fitted value probe).

Outputs of step and run scope are kept in the store (key: estimator, every config field, code
fingerprint, channel; `registry.config_hash`), the same rows `creditlens estimate` writes, so the first
view of a run-scoped estimator pays once and later views read the cache.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from backend.core import workers as work
from backend.core.batch import ALL_CHANNELS as ALL_CHANNELS
from backend.core.batch import RolloutBatch
from backend.core.chunks import DEFAULT_CHUNK_ROLLOUTS, Chunk, plan
from backend.core.errors import InputError, StoreError
from backend.credit import chunk_work, credit_summary, token_classes
from backend.credit.chunk_work import with_channel as with_channel
from backend.estimators import fitting, registry
from backend.store import StoreHandle
from backend.store.estimate_rows import EstimateRows, EstimateStage
from backend.store.explorer_queries import CreditKey, summary_tokens

Progress = Callable[[int, int, str], None]
"""progress(done, total, what): called before each chunk and once at the end."""


@dataclass
class ScopedEstimate:
    """Advantages of some rollouts of a run, each computed at the estimator's declared scope.

    advantages: rollout id -> (L,) float32 over the response's real tokens.
    how: "cache" (read back from the store) or "computed" (then saved, for step/run scopes).
    """

    estimator: str
    config: Any
    scope: str
    channel: str
    advantages: dict[int, np.ndarray]
    how: str
    notes: list[str] = field(default_factory=list)

    def padded(self, rollout_ids: list[int], T: int) -> torch.Tensor:
        """(B, T) float32 in the order of `rollout_ids`, 0 on padding."""
        out = torch.zeros((len(rollout_ids), T), dtype=torch.float32)
        for i, rid in enumerate(rollout_ids):
            a = self.advantages[int(rid)]
            out[i, : len(a)] = torch.from_numpy(a)
        return out


def channel_key(config: Any) -> str:
    """The cache's channel column: the config's channel, or "-" for estimators without one."""
    return str(getattr(config, "channel", "-"))


def scope_of(name: str, config: Any) -> str:
    return registry.get(name).scope_for(config)


def _per_rollout(batch: RolloutBatch, advantages: torch.Tensor) -> dict[int, np.ndarray]:
    return flat_rows(batch, advantages).as_dict()


def flat_rows(batch: RolloutBatch, advantages: torch.Tensor) -> EstimateRows:
    """The advantages of the batch's real tokens, flat in row-major order (what the cache stores)."""
    mask = batch.response_mask.cpu().numpy()
    values = advantages.detach().to(torch.float32).cpu().numpy()[mask]
    return EstimateRows(batch.rollout_ids.cpu().numpy(), mask.sum(axis=1), values)


def _resolve(name: str, config):
    """The estimator's spec, its current name (a deprecated alias reads and writes the cache under the
    current name), its config (default: the estimator's defaults), scope, cache key and channel."""
    spec = registry.get(name)
    name = spec.name
    config = registry.make_config(name) if config is None else config
    return spec, name, config, spec.scope_for(config), registry.config_hash(name, config), channel_key(config)


def estimate_rollouts(
    handle: StoreHandle,
    run: str,
    name: str,
    config: Any = None,
    rollout_ids: list[int] | None = None,
    *,
    use_cache: bool = True,
    save: bool = True,
    progress: Progress | None = None,
    chunk_rollouts: int | None = DEFAULT_CHUNK_ROLLOUTS,
    workers: work.Workers | None = None,
) -> ScopedEstimate:
    """Advantages of `rollout_ids` (default: every rollout of `run`) under estimator `name` with `config`
    (a built config, default: the estimator's defaults), each computed on the batch of its scope.

    Reads the store's cache first; what it computes at step or run scope (or for the whole run) it saves
    for the next caller (unless `save` is false: a read-only server). A store that another process is
    writing, or that this process may not write, just skips the save. A whole run streams in chunks of
    `chunk_rollouts` (see `stream_run`; None: the in-memory path, one batch with every field), split over
    `workers` (default: the command's, `backend.core.workers.current`)."""
    spec, name, config, scope, key, channel = _resolve(name, config)
    with handle.read() as store:
        index = store.rollout_keys(run)
        cached = store.cached_estimate(run, name, key, channel) if use_cache else {}
    wanted = index if rollout_ids is None else index[index["rollout_id"].isin([int(r) for r in rollout_ids])]
    missing = set(int(r) for r in (rollout_ids or [])) - set(wanted["rollout_id"].tolist())
    if missing:
        raise InputError(f"run {run!r} has no rollout {sorted(missing)[0]}")
    wanted_ids = [int(r) for r in wanted["rollout_id"]]
    if use_cache and wanted_ids and set(wanted_ids) <= set(cached):
        return ScopedEstimate(name, config, scope, channel, {r: cached[r] for r in wanted_ids}, "cache")

    advantages: dict[int, np.ndarray] = {}
    if rollout_ids is None or scope == "run":
        grew = use_cache and rollout_ids is None and bool(cached)  # a run that grew: its new steps only
        streamed = stream_run(
            handle,
            run,
            name,
            config,
            chunk_rollouts=chunk_rollouts,
            use_cache=False,
            save=save,
            progress=progress,
            missing_only=grew,
            workers=workers,
        )
        keep = set(wanted_ids)
        if grew:
            advantages.update((r, a) for r, a in cached.items() if r in keep)
        for batch, adv in streamed:  # computed outputs replace cached ones of the same rollouts
            advantages.update((r, a) for r, a in _per_rollout(batch, adv).items() if r in keep)
        return ScopedEstimate(name, config, scope, channel, advantages, "computed", streamed.notes)

    if scope == "step":
        chunks = [{"steps": [int(s)]} for s in sorted(wanted["step"].unique())]
    else:  # group
        chunks = [{"group_ids": sorted(int(g) for g in wanted["group_id"].unique())}]
    notes: list[str] = []
    saving = save and scope != "group"
    credit: list = []  # the Explorer's per-rollout credit summaries of what is saved
    with handle.read() as store:
        definitions = credit_summary.run_classes(store, run)
        classes = credit_summary.credit_classes(store, run)
        for i, chunk in enumerate(chunks):
            if progress is not None:
                progress(i, len(chunks), _describe(scope, chunk, run))
            batch = with_channel(store.load_batch(run, **chunk), channel)
            result = registry.estimate(name, batch, config)
            advantages.update(_per_rollout(batch, result.advantages))
            if saving:
                credit.append(credit_summary.credit_rows(batch, result.advantages, classes, definitions))
            note = result.diagnostics.get("fallback")
            if isinstance(note, str):
                notes.append(note)
    if progress is not None:
        progress(len(chunks), len(chunks), "done")
    if saving:
        _save(
            handle,
            run,
            name,
            key,
            config,
            channel,
            advantages,
            CreditKey(name, key, channel, classes),
            credit,
        )
    return ScopedEstimate(
        name, config, scope, channel, {r: advantages[r] for r in wanted_ids}, "computed", notes
    )


STREAM_MEMORY_LIMIT = os.environ.get("CREDITLENS_STREAM_MEMORY", "256MB")
TOKEN_FIELDS = frozenset(token_classes.CLASS_FIELDS)
"""What `with_tokens` loads besides the estimator's fields: each token's text and what its class reads
(the token rows of `creditlens estimate` carry both)."""
"""DuckDB's buffer pool while a run streams: blocks already read are evicted beyond this, so the store's
cache of the run's pages does not grow with the run."""


@dataclass
class RunEstimate:
    """A whole-run estimate that streams: iterating gives `(batch, advantages)` per chunk, advantages
    (B, T) float32 on the chunk's own padding. `notes` fill in as the chunks are computed."""

    estimator: str
    config: Any
    scope: str
    channel: str
    how: str
    chunks: list[Chunk]
    notes: list[str]
    items: Iterator[tuple[RolloutBatch, torch.Tensor]]

    def __iter__(self) -> Iterator[tuple[RolloutBatch, torch.Tensor]]:
        return self.items


def stream_run(
    handle: StoreHandle,
    run: str,
    name: str,
    config: Any = None,
    *,
    chunk_rollouts: int | None = DEFAULT_CHUNK_ROLLOUTS,
    use_cache: bool = True,
    save: bool = True,
    with_tokens: bool = False,
    progress: Progress | None = None,
    missing_only: bool = False,
    workers: work.Workers | None = None,
) -> RunEstimate:
    """Estimator `name` on every rollout of `run`, chunk by chunk (`backend.core.chunks.plan`): each chunk is
    loaded with only the fields the estimator reads (`registry.fields_for`; and what token classes read
    when `with_tokens`, for each token's text (as Arrow: `RolloutBatch.token_text`) and class, or when saving,
    for the credit summaries), padded to its own longest response, and dropped once the caller has moved on.
    Computed outputs are staged in a temporary Parquet file (`EstimateStage`) and saved to the cache (with
    the Explorer's credit summaries) in one transaction once the last chunk is done; a cache holding the
    whole run is read back chunk by chunk instead (`how` says which). `chunk_rollouts=None`: the
    in-memory plan.

    `workers` (default: the command's, `backend.core.workers.current`): the chunks are computed by that many
    worker processes, or Ray tasks, each reading its chunk from the store, and come back in chunk order to
    this process, which saves them: the outputs are the same rows as in one process. A two-pass estimator's
    chunks stay in this process (its fitted models are not sent to workers).

    `missing_only` (a run that grew): only the steps (step scope) or groups (group scope) holding
    a rollout without a cached output are computed and saved, and only they are yielded: a new step costs
    its own tokens. A run-scoped estimator computes the whole run (an append drops its outputs whole:
    `Runs.publish_staging_run`)."""
    spec, name, config, scope, key, channel = _resolve(name, config)
    with handle.read() as store:
        index = store.rollout_keys(run)
        have = store.cached_rollout_ids(run, name, key, channel) if use_cache or missing_only else set()
    cached = use_cache and len(index) > 0 and len(have) >= len(index)
    # A run-scoped estimator whose only run-wide part is a fitted model streams in groups, in two passes
    two_pass = scope == "run" and chunk_rollouts is not None and fitting.chunk_scope(spec, config) == "group"
    notes: list[str] = []
    only = None
    if missing_only and have and not cached and scope != "run":  # a run-scoped output reads the whole run
        unit = "step" if scope == "step" else "group_id"
        only = {int(u) for u in index.loc[~index["rollout_id"].isin(list(have)), unit].unique()}
    chunks = plan(index, "group" if two_pass else scope, chunk_rollouts, only=only)
    if cached:
        items = _from_cache(handle, run, (name, key, channel), chunks, with_tokens, progress)
        return RunEstimate(name, config, scope, channel, "cache", chunks, notes, items)
    fields = (
        None if chunk_rollouts is None else stream_fields(name, config, save=save, with_tokens=with_tokens)
    )
    run_fit = None
    if two_pass:
        with handle.read() as store:
            run_fit = fitting.RunFit.of_layout(store.rollout_lengths(run))
    split = workers or work.current()
    tokens = None
    if split.count is None and split.ray is None and len(chunks) > 1:  # the default: only a big run splits
        with handle.read() as store:
            tokens = summary_tokens(store, store.run_id(run))
    count = 1 if run_fit is not None or chunk_rollouts is None else split.for_job(len(chunks), tokens)
    items = _computed(
        handle,
        run,
        name,
        config,
        chunks,
        fields,
        save,
        progress,
        notes,
        run_fit,
        only is None,
        (split, count),
    )
    return RunEstimate(name, config, scope, channel, "computed", chunks, notes, items)


def stream_fields(name: str, config: Any, *, save: bool, with_tokens: bool) -> frozenset[str] | None:
    """The batch fields a streamed estimate of `name` loads (None: every field the run has): what the
    estimator reads, what the saved credit summaries read (`save`), and each token's text and class
    (`with_tokens`, the rows of `creditlens estimate`)."""
    fields = registry.fields_for(name, config)
    if fields is not None and save:
        fields = fields | set(credit_summary.SUMMARY_FIELDS)
    if fields is not None and with_tokens:
        fields = fields | TOKEN_FIELDS
    return fields


def _from_cache(
    handle: StoreHandle,
    run: str,
    cache_key: tuple[str, str, str],
    chunks: list[Chunk],
    with_tokens: bool,
    progress: Progress | None,
) -> Iterator[tuple[RolloutBatch, torch.Tensor]]:
    fields = TOKEN_FIELDS if with_tokens else frozenset()
    with handle.read() as store:
        for i, chunk in enumerate(chunks):
            if progress is not None:
                progress(i, len(chunks), f"cached {chunk.describe('')}")
            batch = store.load_batch(run, fields=fields, **chunk.load_args())
            cached = store.cached_estimate(run, *cache_key, id_range=(chunk.first, chunk.last))
            found = ScopedEstimate("", None, "", "", cached, "cache")
            yield batch, found.padded(batch.rollout_ids.tolist(), batch.T)
    if progress is not None:
        progress(len(chunks), len(chunks), "done")


def _computed(
    handle: StoreHandle,
    run: str,
    name: str,
    config: Any,
    chunks: list[Chunk],
    fields: frozenset[str] | None,
    save: bool,
    progress: Progress | None,
    notes: list[str],
    run_fit: fitting.RunFit | None = None,
    whole: bool = True,
    split: tuple[work.Workers, int] = (work.IN_PROCESS, 1),
) -> Iterator[tuple[RolloutBatch, torch.Tensor]]:
    """Each chunk's batch and advantages. With `run_fit` (a run-scoped estimator that fits a model on the
    run, streamed in groups) a first pass over the chunks collects the fits' statistics and solves them
    (`backend.estimators.fitting`); the chunks of the second pass apply the fitted models. `split`: the
    workers and how many of them compute the chunks (1: this process, reading one chunk ahead)."""
    scope = registry.get(name).scope_for(config)
    key, channel = registry.config_hash(name, config), channel_key(config)
    credit: list = []
    passes = 2 if run_fit is not None else 1
    total = passes * len(chunks)

    def describe(i: int, chunk: Chunk, first_pass: bool) -> None:
        if progress is not None:
            what = (
                chunk.describe("group" if run_fit is not None else scope)
                if len(chunks) > 1 or not whole
                else f"the whole run {run!r}"
            )
            progress(i, total, f"fitting on {what}" if first_pass else what)

    with ExitStack() as stack:
        stage = stack.enter_context(EstimateStage()) if save else None
        with handle.read() as store:
            definitions = credit_summary.run_classes(store, run)
            classes = credit_summary.credit_classes(store, run)
        job = chunk_work.ChunkJob(
            str(handle.path.resolve()),
            run,
            name,
            config,
            channel,
            fields,
            STREAM_MEMORY_LIMIT,
            classes if save else None,
            definitions,
        )
        credit_key = CreditKey(name, key, channel, classes)
        for result in chunk_work.chunk_results(handle, job, chunks, split, run_fit, describe, total):
            for note in result.notes:
                if note not in notes:
                    notes.append(note)
            if stage is not None:
                stage.add(flat_rows(result.batch, result.advantages))
                credit.append(result.credit)
            yield result.batch, result.advantages
        # DuckDB: one process writes, or several read, never both; the reading stores are closed here
        if stage is not None and stage.rollouts:
            _save(handle, run, name, key, config, channel, stage, credit_key, credit)
    if progress is not None:
        progress(total, total, "done")


def fitted_run(
    handle: StoreHandle, run: str, name: str, config: Any, chunk_rollouts: int = DEFAULT_CHUNK_ROLLOUTS
) -> fitting.RunFit | None:
    """The solved models of a run-scoped estimator that streams in two passes (None for any other): the
    first pass over the run's group chunks. A batch of some of the run's groups that carries it
    (`run_fit=`) gets the estimator's whole-run numbers (the Rollout view's terms of one rollout)."""
    spec = registry.get(name)
    if spec.scope_for(config) != "run" or fitting.chunk_scope(spec, config) != "group":
        return None
    fields = registry.fields_for(spec.name, config)
    channel = channel_key(config)
    with handle.read() as store:
        run_fit = fitting.RunFit.of_layout(store.rollout_lengths(run))
        chunks = plan(store.rollout_keys(run), "group", chunk_rollouts)
        batches = (
            with_channel(store.load_batch(run, fields=fields, **chunk.load_args()), channel)
            for chunk in chunks
        )
        chunk_work.first_pass(
            run_fit, spec.name, config, (dataclasses.replace(batch, run_fit=run_fit) for batch in batches)
        )
    return run_fit


def _describe(scope: str, chunk: dict, run: str) -> str:
    if "steps" in chunk:
        return f"step {chunk['steps'][0]}"
    if "group_ids" in chunk:
        return f"{len(chunk['group_ids'])} group(s)"
    return f"the whole run {run!r}"


def _save(
    handle: StoreHandle,
    run: str,
    name: str,
    key: str,
    config: Any,
    channel: str,
    advantages: dict[int, np.ndarray] | EstimateStage,
    credit_key: CreditKey,
    credit: list,
) -> bool:
    """Save to the cache; False when the store cannot be written now."""
    try:
        with handle.write() as store, store.memory_limit(STREAM_MEMORY_LIMIT), store.transaction():
            scope = registry.get(name).scope_for(config)  # outputs and summaries: one commit, both or none
            store.save_estimate(run, name, key, dataclasses.asdict(config), channel, advantages, scope)
            credit_summary.save(store, run, credit_key, credit)
    except StoreError:  # StoreBusy included
        return False  # another process is writing, or the file is not ours to write: the next caller computes
    return True
