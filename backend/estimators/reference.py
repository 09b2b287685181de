"""The one entry to the slow twins: `reference_advantages(name, batch, config)`.

The twins themselves live beside their families in backend/estimators/twins/ and are registered by name
with `@loop_twins.twin`; an estimator without one fails here with "no twin for X".
"""

from __future__ import annotations

from typing import Any

import torch

from backend.core.batch import RolloutBatch
from backend.estimators import registry, twins  # noqa: F401  (importing the twins registers them)
from backend.estimators.loop_twins import MissingTwin, get_twin, missing_twins, twin_names  # noqa: F401


def reference_advantages(name: str, batch: RolloutBatch, config: Any = None) -> torch.Tensor:
    """The loop twin of registered estimator `name` (or an alias of it): advantages (B, T) on CPU, with
    `config` or the estimator's defaults."""
    fn = get_twin(name)
    if config is None:
        config = registry.make_config(registry.canonical(name))
    if batch.T == 0:  # as `registry.estimate`: every response is empty, nothing to credit
        return torch.zeros(batch.response_mask.shape, dtype=torch.float32)
    return fn(batch.trained().to("cpu"), config)  # untrained tokens are holes, as in `registry.estimate`
