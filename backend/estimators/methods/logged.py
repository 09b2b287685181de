"""The trainer's own advantage as an estimator-like row, and its gap to a recomputed estimator.

TRL's completion logs carry the advantage the trainer used (`advantage`, one number per completion);
the importers store it per rollout (`logged_advantage`) and the store's batch carries it as the extra
`logged_advantage: (B,) float32` (NaN where a rollout has none). `logged` broadcasts it to every token
so that it sits beside recomputed estimators in every view and command; `logged_gap` is the
per-rollout difference between a recomputed estimator and it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from backend.core.batch import RolloutBatch
from backend.estimators import masked, registry
from backend.estimators.common import Config
from backend.estimators.explaining import broadcast
from backend.estimators.registry import EstimatorResult, register


@dataclass(frozen=True)
class LoggedConfig(Config):
    """No parameters: the advantage the trainer logged, as it logged it."""


@register(
    "logged",
    LoggedConfig,
    "The trainer's logged advantage (TRL `advantage`), broadcast to every token",
    needs=("logged_advantage",),
    family="outcome",
    explain=broadcast,
)
def logged(batch: RolloutBatch, config: LoggedConfig) -> EstimatorResult:
    """A_{i,t} = logged_i on every real token: (B, T); 0 for a rollout without a logged advantage."""
    value = batch.extras["logged_advantage"].to(torch.float32)  # (B,)
    z = torch.nan_to_num(value, nan=0.0)  # (B,)
    return EstimatorResult(masked.broadcast(z, batch.response_mask), {"Z": z, "logged": value})


def logged_gap(batch: RolloutBatch, name: str, config: Any = None) -> pd.DataFrame:
    """Per rollout: the logged advantage, the recomputed one (estimator `name`'s mean advantage over the
    rollout's real tokens; Z for an empty response) and `gap = recomputed - logged`.

    Columns: rollout_id, group_id, step, logged, recomputed, gap (NaN where nothing was logged).
    """
    batch.require("logged_advantage")
    result = registry.estimate(name, batch, config)
    mask = batch.response_mask
    L = mask.sum(dim=1)  # (B,)
    mean_adv = masked.masked_sum(result.advantages, mask, dim=1) / L.clamp(min=1)  # (B,)
    z = result.diagnostics.get("Z")
    if isinstance(z, torch.Tensor) and z.shape == L.shape:
        mean_adv = torch.where(L > 0, mean_adv, z.to(torch.float32))
    logged_value = batch.extras["logged_advantage"].to(torch.float64)
    recomputed = mean_adv.to(torch.float64)
    return pd.DataFrame(
        {
            "rollout_id": batch.rollout_ids.cpu().numpy(),
            "group_id": batch.group_ids.cpu().numpy(),
            "step": batch.steps.cpu().numpy(),
            "logged": logged_value.cpu().numpy(),
            "recomputed": recomputed.cpu().numpy(),
            "gap": (recomputed - logged_value).cpu().numpy(),
        }
    )
