"""Reading a batch token by token, shared by the estimators and the channels: a channel's scores, a
per-token field or a clear error, 1-based positions among real tokens, entropies, step ends, and the
rollout ids behind a row selection (for fallback notes)."""

from __future__ import annotations

import re

import numpy as np
import torch

from backend.core.batch import BatchError, RolloutBatch, missing_channel
from backend.estimators import masked


def scores_of(batch: RolloutBatch, channel: str) -> torch.Tensor:
    """R: (B,) float32 sequence scores of `channel`, or a BatchError listing the channels."""
    if channel not in batch.scores:
        raise BatchError(missing_channel(channel, list(batch.scores)))
    return batch.scores[channel].to(torch.float32)


def need(batch: RolloutBatch, name: str) -> torch.Tensor:
    """A per-token field of the batch or a clear error."""
    batch.require(name)
    value = getattr(batch, name, None)
    return (value if value is not None else batch.extras[name]).to(torch.float32)


def rollout_list(batch: RolloutBatch, rows: torch.Tensor) -> list[int]:
    """Rollout ids of the rows where `rows` (B,) bool is true."""
    return [int(x) for x in batch.rollout_ids[rows.to(batch.device)].tolist()]


def fallback_message(batch: RolloutBatch, rows: torch.Tensor, what: str = "uniform fallback") -> str | None:
    ids = rollout_list(batch, rows)
    if not ids:
        return None
    shown = ", ".join(str(i) for i in ids[:20]) + (", ..." if len(ids) > 20 else "")
    return f"{what} on rollouts [{shown}] ({len(ids)} of {batch.B})"


def masked_entropies(batch: RolloutBatch) -> torch.Tensor:
    """H: (B, T) float32 entropies, 0 on padding (clamped at 0 against tiny negative float noise)."""
    return torch.where(batch.response_mask, need(batch, "entropies").clamp(min=0.0), 0.0)


def token_positions(batch: RolloutBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(t, L): 1-based position among real tokens (B, T) and L_i (B, 1), both float32."""
    mask = batch.response_mask
    t = (masked.positions(mask) + 1).to(torch.float32)
    L = mask.sum(dim=1, keepdim=True).to(torch.float32)
    return t, L


def step_ends(batch: RolloutBatch, pattern: str) -> tuple[torch.Tensor, str | None]:
    """(B, T) bool last token of each step, and a note when the run has no token text.

    The regex runs once per response over its joined text; character offsets map to tokens with one
    `searchsorted`, so there is no python loop over tokens. The last real token always ends a step.
    """
    mask = batch.response_mask
    t, L = token_positions(batch)
    last = (t == L) & mask
    if batch.tokens is None:
        return last, "no token text in this run: step ends unknown, used the last token only"
    regex = re.compile(pattern)
    flat_ends = np.zeros(int(mask.sum()), dtype=bool)
    offset = 0
    for row in batch.tokens:
        if row:
            cum = np.cumsum(np.fromiter(map(len, row), dtype=np.int64, count=len(row)))
            chars = np.fromiter(
                (m.end() - 1 for m in regex.finditer("".join(row)) if m.end() > m.start()), dtype=np.int64
            )
            if chars.size:
                flat_ends[offset + np.searchsorted(cum, chars, side="right")] = True
        offset += len(row)
    if offset != flat_ends.shape[0]:
        return last, "token text does not line up with the response mask: used the last token only"
    ends = torch.zeros(mask.shape, dtype=torch.bool)
    ends[mask.cpu()] = torch.from_numpy(flat_ends)
    return ends.to(batch.device) | last, None
