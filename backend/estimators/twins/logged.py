"""Twin of logged.py: the trainer's logged sequence advantage broadcast (0 where it is missing)."""

from __future__ import annotations

import math

import torch

from backend.core.batch import RolloutBatch
from backend.estimators.loop_twins import twin
from backend.estimators.twins.loops import real_columns, to_tensor


@twin("logged")
def logged_twin(batch: RolloutBatch, config) -> torch.Tensor:
    rows = real_columns(batch)
    logged = batch.extras["logged_advantage"].tolist()
    return to_tensor(
        batch,
        rows,
        [[0.0 if math.isnan(logged[i]) else logged[i]] * len(cols) for i, cols in enumerate(rows)],
    )
