"""Per-rollout credit summaries of an estimator output: |A| mass per token class, max |A|, mean A.

`backend.estimates` calls `credit_rows` on every batch whose advantages it saves to the store's cache, and
saves the rows beside them (`save`), so the Explorer's share columns and trends are SQL over small rows.
The token classes come from one place, `credit_classes` + `class_ids`: when classes become per-run
(user-defined), these two functions change and nothing else does.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch

from backend import analysis
from backend.batch import RolloutBatch
from backend.store import Store
from backend.store.explorer_queries import CreditKey, save_credit_summary


def credit_classes(store: Store, run: str) -> tuple[str, ...]:
    """The token classes of `run`, in priority order (today the built-in `analysis.CREDIT_CLASSES`)."""
    del store, run  # the built-in classes are the same for every run
    return tuple(analysis.CREDIT_CLASSES)


def class_ids(batch: RolloutBatch, classes: tuple[str, ...]) -> np.ndarray:
    """(B, T) int64 index into `classes`, -1 on padding."""
    ids = analysis.token_class_ids(batch)
    builtin = tuple(analysis.CREDIT_CLASSES)
    if tuple(classes) == builtin:
        return ids
    remap = np.array([classes.index(c) if c in classes else -1 for c in builtin], dtype=np.int64)
    return np.where(ids >= 0, remap[np.clip(ids, 0, None)], -1)


def credit_rows(batch: RolloutBatch, advantages: torch.Tensor | np.ndarray,
                classes: tuple[str, ...]) -> pa.Table:
    """One row per rollout of `batch`: rollout_id, abs_total (Σ|A|), max_abs, mean_adv (mean A over the
    response's tokens), class_abs (Σ|A| per class, in `classes` order) and class_tokens (tokens per class).

    advantages: (B, T), 0 on padding.
    """
    if isinstance(advantages, torch.Tensor):
        advantages = advantages.detach().cpu().numpy()
    adv = np.asarray(advantages, dtype=np.float64)  # (B, T)
    mask = batch.response_mask.cpu().numpy().astype(bool)  # (B, T)
    B, C = mask.shape[0], len(classes)
    magnitude = np.abs(adv) * mask  # (B, T)
    lengths = mask.sum(axis=1)  # (B,)
    cls = class_ids(batch, classes)  # (B, T)
    known = mask & (cls >= 0)
    rows = np.broadcast_to(np.arange(B)[:, None], mask.shape)[known]
    flat = rows * C + cls[known]
    class_abs = np.bincount(flat, weights=magnitude[known], minlength=B * C).reshape(B, C)  # (B, C)
    class_tokens = np.bincount(flat, minlength=B * C).reshape(B, C)  # (B, C)
    return pa.table({
        "rollout_id": pa.array(batch.rollout_ids.cpu().numpy().astype(np.int32)),
        "abs_total": pa.array(magnitude.sum(axis=1)),
        "max_abs": pa.array(magnitude.max(axis=1) if mask.shape[1] else np.zeros(B)),
        "mean_adv": pa.array((adv * mask).sum(axis=1) / np.maximum(lengths, 1)),
        "class_abs": pa.array(list(class_abs), pa.list_(pa.float64())),
        "class_tokens": pa.array(list(class_tokens.astype(np.int32)), pa.list_(pa.int32())),
    })


def save(store: Store, run: str, key: CreditKey, rows: list[pa.Table]) -> None:
    """Store credit rows of `run` (call inside a write transaction)."""
    if rows:
        save_credit_summary(store, store.run_id(run), key, pa.concat_tables(rows))
