"""Tensors and arrays at the boundary between the estimators (torch) and the tables and views (numpy)."""

from __future__ import annotations

import numpy as np
import torch


def to_numpy(x: torch.Tensor | np.ndarray) -> np.ndarray:
    """A CPU numpy view of a tensor (detached), or the array itself."""
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def to_tensor(x: np.ndarray | list, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A tensor with its own C-ordered memory from an array that pandas, pyarrow or DuckDB handed over.

    Their arrays may be views with negative or non-unit strides (a pivoted or reindexed frame's
    `to_numpy()` is one) or read-only (zero-copy from Arrow): `torch.tensor`/`torch.from_numpy` refuse
    the first and warn on the second, so every hand-over of such an array goes through here.
    """
    array = np.asarray(x)
    if not (array.flags.c_contiguous and array.flags.writeable):
        array = np.array(array, order="C", copy=True)
    tensor = torch.from_numpy(array)
    return tensor if dtype is None else tensor.to(dtype)
