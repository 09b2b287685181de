"""Chunks of a run for a streamed whole-run estimate: which rollouts go into each batch.

An estimator's number for a rollout depends only on the batch of its declared scope (registry.SCOPES), so
a whole run can be computed chunk by chunk with the same result:

- group scope: whole groups, packed in order of their first rollout id until a chunk holds at least
  `chunk_rollouts` rollouts (a group is never split, so one chunk holds at most `chunk_rollouts` plus
  one group's size minus one);
- step scope: one training step per chunk (batch statistics are per step; a step is never split);
- run scope: the whole run in one chunk. Estimators that are run-scoped only because they fit a model on
  the run (token_rm, rudder, the fitted value probe) stream in group chunks instead, in two passes (fit,
  then apply: `backend.estimators.fitting`); the rest (a batch statistic over a run-scoped base) still
  read the run at once: see docs/benchmarks.md for the cost.

Each chunk is read by a rollout-id range (rows are stored in rollout order, so DuckDB skips the rest)
plus, only when other rollouts fall inside that range, the list of its groups or steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

DEFAULT_CHUNK_ROLLOUTS = 4096
"""Rollouts per chunk of a group-scoped estimate (whole groups are packed up to this)."""


@dataclass(frozen=True)
class Chunk:
    """Rollouts `first`..`last` (ids, inclusive) of a run, or those of them in `group_ids`/`steps`."""

    first: int
    last: int
    rollouts: int
    group_ids: tuple[int, ...] | None = None
    steps: tuple[int, ...] | None = None

    def load_args(self) -> dict:
        """Keyword arguments of `Store.load_batch` that read exactly this chunk."""
        args: dict = {"id_range": (self.first, self.last)}
        if self.group_ids is not None:
            args["group_ids"] = list(self.group_ids)
        if self.steps is not None:
            args["steps"] = list(self.steps)
        return args

    def describe(self, scope: str) -> str:
        return f"{self.rollouts} rollouts ({scope} scope, ids {self.first}..{self.last})"


def plan(
    index: pd.DataFrame,
    scope: str,
    chunk_rollouts: int | None = DEFAULT_CHUNK_ROLLOUTS,
    only: set[int] | None = None,
) -> list[Chunk]:
    """The chunks of a run whose rollouts are `index` (rollout_id, group_id, step), in order of their first
    rollout. `chunk_rollouts=None` keeps the in-memory plan: one batch for the run, one per step for
    step scope. `only` (step or group scope): the steps (groups) to cover, the others left out; a chunk
    still names its steps (groups) when other rollouts of the run fall inside its id range."""
    if len(index) == 0:
        return []
    if chunk_rollouts is not None and chunk_rollouts < 1:
        raise ValueError(f"chunk_rollouts must be at least 1, got {chunk_rollouts}")
    ids = np.sort(index["rollout_id"].to_numpy())
    if scope == "run" or (scope == "group" and chunk_rollouts is None and only is None):
        return [Chunk(int(ids[0]), int(ids[-1]), len(ids))]
    key = "step" if scope == "step" else "group_id"
    units = index.groupby(key)["rollout_id"].agg(["min", "max", "size"]).sort_values("min")
    if only is not None:
        units = units[units.index.isin(list(only))]
        if units.empty:
            return []
    limit = float("inf") if chunk_rollouts is None else chunk_rollouts
    packs: list[list[int]] = [[]]
    filled = 0
    # plain ints, not pandas element access: a run has one unit per group (0.05 s for 2,445 groups before)
    for position, size in enumerate(units["size"].tolist()):
        if packs[-1] and (scope == "step" or filled >= limit):
            packs.append([])
            filled = 0
        packs[-1].append(position)
        filled += size
    chunks = []
    for pack in packs:
        part = units.iloc[pack]
        first, last, n = int(part["min"].min()), int(part["max"].max()), int(part["size"].sum())
        inside = int(np.searchsorted(ids, last, "right") - np.searchsorted(ids, first, "left"))
        members = None if inside == n else tuple(int(k) for k in part.index)
        chunks.append(
            Chunk(
                first,
                last,
                n,
                group_ids=members if key == "group_id" else None,
                steps=members if key == "step" else None,
            )
        )
    return chunks
