"""Twins of outcome.py: the group-relative outcome Z broadcast to every real token."""

from __future__ import annotations

import torch

from backend.batch import RolloutBatch
from backend.estimators.registry import twin
from backend.estimators.twins.loops import outcome_loop, real_columns, scores_list, to_tensor


def _broadcast(batch: RolloutBatch, config, outcome: str) -> torch.Tensor:
    rows = real_columns(batch)
    z = outcome_loop(scores_list(batch, config.channel), batch.group_ids.tolist(), outcome,
                     getattr(config, "epsilon", 1e-6))
    return to_tensor(batch, rows, [[z[i]] * len(cols) for i, cols in enumerate(rows)])


@twin("grpo")
def grpo_twin(batch: RolloutBatch, config) -> torch.Tensor:
    return _broadcast(batch, config, "grpo" if config.norm_by_std else "dr_grpo")


@twin("dr_grpo")
def dr_grpo_twin(batch: RolloutBatch, config) -> torch.Tensor:
    return _broadcast(batch, config, "dr_grpo")


@twin("rloo")
def rloo_twin(batch: RolloutBatch, config) -> torch.Tensor:
    return _broadcast(batch, config, "rloo")
