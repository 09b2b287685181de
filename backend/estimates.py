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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from backend import credit_summary
from backend.batch import RolloutBatch
from backend.errors import InputError, StoreError
from backend.estimators import registry
from backend.store import StoreHandle
from backend.store.explorer_queries import CreditKey

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


ALL_CHANNELS = "all"


def with_channel(batch: RolloutBatch, channel: str) -> RolloutBatch:
    """The batch an estimator on `channel` reads: for 'all' (when the run has no channel of that name)
    the per-rollout sum of the channel scores is added as channel 'all' (missing scores skipped)."""
    if channel == ALL_CHANNELS and ALL_CHANNELS not in batch.scores:
        return batch.with_channel_sum(ALL_CHANNELS)
    return batch


def scope_of(name: str, config: Any) -> str:
    return registry.get(name).scope_for(config)


def _per_rollout(batch: RolloutBatch, advantages: torch.Tensor) -> dict[int, np.ndarray]:
    lengths = batch.response_mask.sum(dim=1).tolist()
    adv = advantages.detach().to(torch.float32).cpu().numpy()
    return {int(rid): adv[i, : int(lengths[i])].copy() for i, rid in enumerate(batch.rollout_ids.tolist())}


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
) -> ScopedEstimate:
    """Advantages of `rollout_ids` (default: every rollout of `run`) under estimator `name` with `config`
    (a built config, default: the estimator's defaults), each computed on the batch of its scope.

    Reads the store's cache first; what it computes at step or run scope (or for the whole run) it saves
    for the next caller (unless `save` is false: a read-only server). A store that another process is
    writing, or that this process may not write, just skips the save."""
    spec = registry.get(name)
    name = spec.name  # a deprecated alias reads and writes the cache under the current name
    config = registry.make_config(name) if config is None else config
    scope = spec.scope_for(config)
    key = registry.config_hash(name, config)
    channel = channel_key(config)
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

    whole_run = rollout_ids is None or scope == "run"
    if whole_run:
        chunks: list[dict] = [{}]  # one batch: the whole run (group scope included: groups are independent)
        if scope == "step":
            chunks = [{"steps": [int(s)]} for s in sorted(index["step"].unique())]
    elif scope == "step":
        chunks = [{"steps": [int(s)]} for s in sorted(wanted["step"].unique())]
    else:  # group
        chunks = [{"group_ids": sorted(int(g) for g in wanted["group_id"].unique())}]

    advantages: dict[int, np.ndarray] = {}
    notes: list[str] = []
    saving = save and (scope != "group" or whole_run)
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
        _save(handle, run, name, key, config, channel, advantages, CreditKey(name, key, channel, classes),
              credit)
    return ScopedEstimate(name, config, scope, channel, {r: advantages[r] for r in wanted_ids}, "computed",
                          notes)


def _describe(scope: str, chunk: dict, run: str) -> str:
    if "steps" in chunk:
        return f"step {chunk['steps'][0]}"
    if "group_ids" in chunk:
        return f"{len(chunk['group_ids'])} group(s)"
    return f"the whole run {run!r}"


def _save(handle: StoreHandle, run: str, name: str, key: str, config: Any, channel: str,
          advantages: dict[int, np.ndarray], credit_key: CreditKey, credit: list) -> None:
    try:
        with handle.write() as store:
            store.save_estimate(run, name, key, dataclasses.asdict(config), channel, advantages)
            with store.transaction():
                credit_summary.save(store, run, credit_key, credit)
    except StoreError:  # StoreBusy included
        pass  # another process is writing, or the file is not ours to write: the next caller computes again
