"""Per-rollout credit summaries of an estimator output: |A| mass per token class, max |A|, mean A.

`backend.estimates` calls `credit_rows` on every batch whose advantages it saves to the store's cache, and
saves the rows beside them (`save`), so the Explorer's share columns and trends are SQL over small rows.
The token classes are the run's own (`run_classes`, see backend/token_classes.py), defaults otherwise.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch

from backend import token_classes
from backend.batch import RolloutBatch
from backend.store import Store
from backend.store.explorer_queries import CreditKey, save_credit_summary


def run_classes(store: Store, run: str) -> tuple[token_classes.TokenClass, ...]:
    """The token classes of `run`: its own (saved in its meta), else the defaults."""
    return token_classes.from_json(store.run_info(run)["meta"].get("token_classes"))


def credit_classes(store: Store, run: str) -> tuple[str, ...]:
    """The class names of `run`, in priority order, `other` last (the summary's columns). Saving new
    classes drops the run's credit summaries (`token_classes.save`), so names identify definitions."""
    return token_classes.names(run_classes(store, run))


Definitions = tuple[token_classes.TokenClass, ...]


def class_ids(batch: RolloutBatch, classes: tuple[str, ...],
              definitions: Definitions = token_classes.DEFAULT_CLASSES) -> np.ndarray:
    """(B, T) int64 index into `classes` (names from `credit_classes`), -1 on padding; `definitions`: the
    run's classes (`run_classes`)."""
    ids = token_classes.class_ids(batch, definitions)
    names = token_classes.names(definitions)
    if tuple(classes) == names:
        return ids
    remap = np.array([classes.index(c) if c in classes else -1 for c in names], dtype=np.int64)
    return np.where(ids >= 0, remap[np.clip(ids, 0, None)], -1)


def credit_rows(batch: RolloutBatch, advantages: torch.Tensor | np.ndarray, classes: tuple[str, ...],
                definitions: Definitions = token_classes.DEFAULT_CLASSES) -> pa.Table:
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
    cls = class_ids(batch, classes, definitions)  # (B, T)
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
