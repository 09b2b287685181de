"""Per-rollout credit summaries of an estimator output: |A|, positive and negative credit per token class,
max |A|, mean A; on an agent run, |A| per assistant turn and on the turns that call a tool.

`backend.credit.estimates` calls `credit_rows` on every batch whose advantages it saves to the store's cache,
and saves the rows beside them (`save`), so the Explorer's share columns and trends are SQL over small rows.
The token classes are the run's own (`run_classes`, see backend/credit/token_classes.py), defaults otherwise.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch

from backend.core.batch import RolloutBatch
from backend.core.turns import POLICY_ROLE
from backend.credit import token_classes
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
SUMMARY_FIELDS = (*token_classes.CLASS_FIELDS, "turns")
"""The batch fields `credit_rows` reads besides the advantages: what token classes read, and the turns (an
agent run's credit by turn). A streamed estimate that saves credit summaries loads them."""


def flat_class_ids(
    batch: RolloutBatch, classes: tuple[str, ...], definitions: Definitions = token_classes.DEFAULT_CLASSES
) -> np.ndarray:
    """(N,) int64 index into `classes` (names from `credit_classes`) of every real token, row-major; -1
    for a class `classes` lacks. `definitions`: the run's classes (`run_classes`)."""
    ids = token_classes.flat_class_ids(batch, definitions)
    names = token_classes.names(definitions)
    if tuple(classes) == names:
        return ids
    remap = np.array([classes.index(c) if c in classes else -1 for c in names], dtype=np.int64)
    return remap[ids]


def class_ids(
    batch: RolloutBatch, classes: tuple[str, ...], definitions: Definitions = token_classes.DEFAULT_CLASSES
) -> np.ndarray:
    """(B, T) int64 index into `classes` (names from `credit_classes`), -1 on padding; `definitions`: the
    run's classes (`run_classes`)."""
    mask = batch.response_mask.cpu().numpy().astype(bool)
    out = np.full(mask.shape, -1, dtype=np.int64)
    out[mask] = flat_class_ids(batch, classes, definitions)
    return out


def credit_rows(
    batch: RolloutBatch,
    advantages: torch.Tensor | np.ndarray,
    classes: tuple[str, ...],
    definitions: Definitions = token_classes.DEFAULT_CLASSES,
) -> pa.Table:
    """One row per rollout of `batch`: rollout_id, abs_total (Σ|A|), max_abs, mean_adv (mean A over the
    response's tokens), class_abs (Σ|A| per class, in `classes` order), class_pos and class_neg (the
    positive credit Σ max(A, 0) and the negative credit Σ max(−A, 0) per class), class_tokens (tokens per
    class), and on a batch with turns turn_abs and call_abs (`turn_credit`; null without turns).

    advantages: (B, T), 0 on padding.
    """
    if isinstance(advantages, torch.Tensor):
        advantages = advantages.detach().cpu().numpy()
    mask = batch.response_mask.cpu().numpy().astype(bool)  # (B, T)
    B, C = mask.shape[0], len(classes)
    lengths = mask.sum(axis=1)  # (B,)
    # Flat over the real tokens (row-major): N numbers, not B x T; each rollout is one segment.
    adv = np.asarray(advantages)[mask].astype(np.float64)  # (N,)
    magnitude = np.abs(adv)
    alive = lengths > 0
    starts = (np.cumsum(lengths) - lengths)[alive]

    def per_rollout(values: np.ndarray, reduce: np.ufunc = np.add) -> np.ndarray:
        out = np.zeros(B, dtype=values.dtype)
        if len(starts):
            out[alive] = reduce.reduceat(values, starts)
        return out

    abs_total = per_rollout(magnitude)
    positive = np.maximum(adv, 0.0)  # (N,) |A| = positive + negative
    pos_total = per_rollout(positive)
    cls = flat_class_ids(batch, classes, definitions)  # (N,)
    class_abs = np.zeros((B, C))
    class_pos = np.zeros((B, C))
    class_tokens = np.zeros((B, C), dtype=np.int32)
    counts = np.bincount(cls + 1, minlength=C + 1)[1:]  # tokens per class (-1: a class not in `classes`)
    for k in np.flatnonzero(counts):
        if counts[k] == len(cls):  # every token in one class (a run without text: all `other`)
            class_abs[:, k], class_pos[:, k], class_tokens[:, k] = abs_total, pos_total, lengths
        else:
            hit = cls == k
            class_abs[:, k] = per_rollout(np.where(hit, magnitude, 0.0))
            class_pos[:, k] = per_rollout(np.where(hit, positive, 0.0))
            class_tokens[:, k] = per_rollout(hit.astype(np.int32))
    class_neg = np.maximum(class_abs - class_pos, 0.0)  # Σ max(−A, 0) per class (no rounding below 0)
    per_class = pa.array(np.arange(0, B * C + 1, C, dtype=np.int32))  # offsets of C numbers per rollout
    return pa.table(
        {
            "rollout_id": pa.array(batch.rollout_ids.cpu().numpy().astype(np.int32)),
            "abs_total": pa.array(abs_total),
            "max_abs": pa.array(per_rollout(magnitude, np.maximum)),
            "mean_adv": pa.array(per_rollout(adv) / np.maximum(lengths, 1)),
            "class_abs": pa.ListArray.from_arrays(per_class, pa.array(class_abs.reshape(-1))),
            "class_pos": pa.ListArray.from_arrays(per_class, pa.array(class_pos.reshape(-1))),
            "class_neg": pa.ListArray.from_arrays(per_class, pa.array(class_neg.reshape(-1))),
            "class_tokens": pa.ListArray.from_arrays(per_class, pa.array(class_tokens.reshape(-1))),
            **turn_credit(batch, np.asarray(advantages)),
        }
    )


CALLED_BY = frozenset({"tool", "environment"})
"""The roles whose turn answers the assistant turn before it: that assistant turn called a tool (or acted)."""


def turn_credit(batch: RolloutBatch, advantages: np.ndarray) -> dict[str, pa.Array]:
    """Per rollout of an agent run: turn_abs, Σ|A| on each assistant turn in order (a response without
    turns is one assistant turn over its tokens, as `backend.views.turns` reads it), and call_abs, Σ|A| on
    the assistant turns that a tool's or an environment's turn follows (the turns that called a tool);
    both null on a batch without turns. Tokens outside the policy's turns are left out: the trainer does
    not train them, so every estimator gives them 0.

    advantages: (B, T), 0 on padding.
    """
    if batch.turns is None:
        return {
            "turn_abs": pa.nulls(batch.B, pa.list_(pa.float64())),
            "call_abs": pa.nulls(batch.B, pa.float64()),
        }
    magnitude = np.abs(advantages.astype(np.float64))  # (B, T)
    lengths = batch.lengths.tolist()
    turn_abs, call_abs = [], []
    for row, turns in enumerate(batch.turns):
        turns = list(turns) or [(POLICY_ROLE, 0, int(lengths[row]))]
        per_turn, calls = [], 0.0
        for k, (role, start, end) in enumerate(turns):
            if role != POLICY_ROLE:
                continue
            mass = float(magnitude[row, start:end].sum())
            per_turn.append(mass)
            calls += mass if k + 1 < len(turns) and turns[k + 1][0] in CALLED_BY else 0.0
        turn_abs.append(per_turn)
        call_abs.append(calls)
    return {"turn_abs": pa.array(turn_abs, pa.list_(pa.float64())), "call_abs": pa.array(call_abs)}


def save(store: Store, run: str, key: CreditKey, rows: list[pa.Table]) -> None:
    """Store credit rows of `run` (call inside a write transaction)."""
    if rows:
        save_credit_summary(store, store.run_id(run), key, pa.concat_tables(rows))
