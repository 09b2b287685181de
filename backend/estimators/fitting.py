"""Models fitted on a whole run (token_rm, rudder, the fitted value probe): in memory, or in two streamed
passes.

A fit site (`fitted`) turns a batch into a model. In memory the batch is the whole run (`batch.run_fit` is
None) and the site collects its statistics and solves at once. When `backend.credit.estimates.stream_run`
streams a run in chunks of whole groups, every chunk carries one `RunFit`:

1. pass one (phase "collect"): each site adds its chunk's statistics to the `RunFit` and gets None back (the
   estimator's outputs of this pass are thrown away). The statistics are either exactly additive over
   chunks (a ridge fit's per-fold normal equations, `features.RidgeStats`) or a bounded sample of rows
   chosen by their place in the whole run (the same rows the in-memory path picks);
2. `RunFit.solve()` fits each site's model once;
3. pass two (phase "apply"): each site gets its model back and the chunk's outputs are the estimate.

Places in the run (token and row numbers, group folds) are those of the in-memory batch, whose rows are the
run's rollouts in id order, so the streamed estimate equals the in-memory one up to round-off.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from backend.core.batch import BatchError, RolloutBatch

_FIT_SCOPE: ContextVar[str] = ContextVar("fit_scope", default="run")


def fit_scope() -> str:
    """The scope a config declares for a model fitted on the whole run: "run", except inside `chunk_scope`."""
    return _FIT_SCOPE.get()


def chunk_scope(spec: Any, config: Any) -> str:
    """The scope of estimator `spec` under `config` apart from its models fitted on the run (those fit in a
    first streamed pass): "group" when that is all that makes it run-scoped, so it streams in groups."""
    token = _FIT_SCOPE.set("group")
    try:
        return spec.scope_for(config)
    finally:
        _FIT_SCOPE.reset(token)


@dataclass
class RunFit:
    """What the fit sites of a streamed run share: the run's layout and, per site, its statistics or model.

    rollout_ids: (B,) the run's rollout ids, sorted (the in-memory batch's row order)
    lengths: (B,) their response lengths; group_ids: (B,) their groups
    """

    rollout_ids: np.ndarray
    lengths: np.ndarray
    group_ids: np.ndarray
    phase: str = "collect"
    stats: dict[Hashable, Any] = field(default_factory=dict)
    solvers: dict[Hashable, Callable[[Any], Any]] = field(default_factory=dict)
    models: dict[Hashable, Any] = field(default_factory=dict)

    @classmethod
    def of_layout(cls, layout) -> RunFit:
        """From `Store.rollout_lengths(run)` (columns rollout_id, length, group_id)."""
        return cls(*(layout[column].to_numpy() for column in ("rollout_id", "length", "group_id")))

    def __post_init__(self) -> None:
        order = np.argsort(self.rollout_ids, kind="stable")
        self.rollout_ids = np.asarray(self.rollout_ids, dtype=np.int64)[order]
        self.lengths = np.asarray(self.lengths, dtype=np.int64)[order]
        self.group_ids = np.asarray(self.group_ids, dtype=np.int64)[order]
        self.offsets = np.cumsum(self.lengths) - self.lengths  # first token of each row in the run
        self.groups = np.unique(self.group_ids)

    @property
    def n_rows(self) -> int:
        return len(self.rollout_ids)

    @property
    def n_tokens(self) -> int:
        return int(self.lengths.sum())

    def rows(self, batch: RolloutBatch) -> torch.Tensor:
        """(B,) int64 the chunk's rows in the run."""
        ids = batch.rollout_ids.cpu().numpy()
        rows = np.searchsorted(self.rollout_ids, ids)
        if len(ids) and (rows.max() >= self.n_rows or (self.rollout_ids[rows] != ids).any()):
            raise RuntimeError("a chunk holds rollouts that are not in the run it was planned on")
        return torch.from_numpy(rows).to(batch.device)

    def token_numbers(self, batch: RolloutBatch) -> torch.Tensor:
        """(N,) int64 the run-wide number of each real token of the chunk (row-major, as `mask.nonzero`)."""
        mask = batch.response_mask
        start = torch.from_numpy(self.offsets).to(batch.device)[self.rows(batch)]  # (B,)
        row, col = mask.nonzero(as_tuple=True)
        return start[row] + col  # real tokens are a prefix of each row

    def group_index(self, batch: RolloutBatch) -> tuple[torch.Tensor, int]:
        """(B,) int64 dense group index in the run's sorted groups, and the run's number of groups."""
        index = np.searchsorted(self.groups, batch.group_ids.cpu().numpy())
        return torch.from_numpy(index).to(batch.device), len(self.groups)

    def add(self, key: Hashable, stats: Any, solve: Callable[[Any], Any]) -> None:
        if self.phase != "collect":
            raise RuntimeError(f"fit {key!r} collects after the run's models were solved")
        self.stats[key] = stats if key not in self.stats else self.stats[key].merge(stats)
        self.solvers[key] = solve

    def solve(self) -> None:
        """Fit every site's model from its statistics; the next pass applies them."""
        self.models = {key: self.solvers[key](stats) for key, stats in self.stats.items()}
        self.stats, self.phase = {}, "apply"

    def model(self, key: Hashable) -> Any:
        if key not in self.models:
            raise RuntimeError(f"fit {key!r} was not collected in the first pass over the run")
        return self.models[key]


def fitted(
    batch: RolloutBatch, key: Hashable, collect: Callable[[], Any], solve: Callable[[Any], Any]
) -> Any | None:
    """The model of fit site `key` (a name plus every parameter the fit depends on): solved from
    `collect()` on this batch in memory; None while a streamed run collects (pass one); the run's model in
    pass two. `collect()` returns statistics with `merge(other)`; `solve(stats)` returns the model."""
    run_fit = batch.run_fit
    if run_fit is None:
        return solve(collect())
    if run_fit.phase == "collect":
        run_fit.add(key, collect(), solve)
        return None
    return run_fit.model(key)


def strided(n: int, keep: int, device: torch.device) -> torch.Tensor:
    """Deterministic evenly strided indices of `keep` out of `n` (all of them when n <= keep)."""
    if n <= keep:
        return torch.arange(n, device=device)
    return torch.linspace(0, n - 1, keep, device=device).round().long()


def token_sample(batch: RolloutBatch, max_tokens: int) -> torch.Tensor:
    """Indices into the batch's real tokens (`mask.nonzero` order) of the strided sample of at most
    `max_tokens` tokens of the run (the batch itself in memory; its run when streamed)."""
    run_fit = batch.run_fit
    if run_fit is None:
        return strided(int(batch.response_mask.sum()), max_tokens, batch.device)
    numbers = run_fit.token_numbers(batch)
    chosen = strided(run_fit.n_tokens, max_tokens, batch.device)
    return torch.isin(numbers, chosen).nonzero(as_tuple=True)[0]


def sample_note(batch: RolloutBatch, what: str, max_tokens: int, rows: bool = False) -> str | None:
    """What a sampled fit says in the output (None when the run has no more than `max_tokens` tokens);
    `rows`: the sample is of whole responses holding about `max_tokens` tokens."""
    n = int(batch.response_mask.sum()) if batch.run_fit is None else batch.run_fit.n_tokens
    if n <= max_tokens:
        return None
    sample = f"whole responses holding about {max_tokens:,}" if rows else f"{max_tokens:,}"
    return (
        f"{what} fitted on an evenly strided sample of {sample} of the run's {n:,} tokens "
        "(the same sample in memory and streamed)"
    )


def same_columns(names: tuple[str, ...], other: tuple[str, ...]) -> None:
    """Statistics of two chunks add up only over the same feature columns."""
    if names != other:
        raise BatchError(
            f"the run's chunks have different feature columns ({', '.join(names)} vs "
            f"{', '.join(other)}): some rollouts lack a field the others have; "
            "estimate it in memory (--chunk none)"
        )
