"""Tensors and arrays at the boundary between the estimators (torch) and the tables and views (numpy)."""

from __future__ import annotations

import numpy as np
import torch


def to_numpy(x: torch.Tensor | np.ndarray) -> np.ndarray:
    """A CPU numpy view of a tensor (detached), or the array itself."""
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
