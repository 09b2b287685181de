"""Hypothesis strategy for estimator tests: small ragged batches with every field an estimator reads.

Draws the number of groups and their sizes (singletons included), each response's length (0 included),
token ids from a tiny vocabulary (so prefix trees branch and KTAE's tokens recur), tied or distinct scores,
missing scores on a second channel, entropies with ties (log-probabilities without), resampled positions,
and optional mid-sequence holes in the mask (then without token text, which must line up with the real
tokens).
"""

from __future__ import annotations

import dataclasses
import math

import torch
from hypothesis import strategies as st

from backend.core.batch import RolloutBatch, batch_from_records

TEXTS = ["a", " ", "\n", "1", ".", "x\n"]
SCORES = [0.0, 1.0, 0.5, 1.25]
ENTROPIES = [0.0, 0.25, 0.5, 1.0, 2.0]  # few values: ties at quantile thresholds


@st.composite
def batches(draw, max_groups: int = 4, max_size: int = 4, max_len: int = 7) -> RolloutBatch:
    sizes = draw(st.lists(st.integers(1, max_size), min_size=1, max_size=max_groups))
    records = []
    for g, size in enumerate(sizes):
        for _ in range(size):
            L = draw(st.integers(0, max_len))
            ids = draw(st.lists(st.integers(1, 3), min_size=L, max_size=L))
            per_token = st.lists(st.sampled_from(ENTROPIES), min_size=L, max_size=L)
            floats = st.lists(st.floats(-3.0, 3.0, width=32), min_size=L, max_size=L)
            levels = st.lists(st.integers(0, 60), min_size=L, max_size=L)
            scores = {"task": draw(st.sampled_from(SCORES))}
            if draw(st.booleans()):
                scores["style"] = -float(draw(st.booleans()))  # missing otherwise: NaN in the batch
            records.append(
                {
                    "token_ids": ids,
                    "group_id": 7 * g + 1,
                    "rollout_id": len(records),
                    "scores": scores,
                    "entropies": draw(per_token),
                    # distinct (steps of 0.05 plus 1e-4 x a token counter below 500): STARE picks its
                    # top-surprisal tokens with torch.topk, as the official code does, and topk's order among
                    # equal values is unspecified
                    "logprobs": [
                        -0.05 * n - 1e-4 * (len(records) * max_len + k) for k, n in enumerate(draw(levels))
                    ],
                    "ref_logprobs": [-abs(x) for x in draw(floats)],
                    "values": draw(floats),
                    "tokens": [TEXTS[i % len(TEXTS)] for i in ids],
                    "extras": {
                        "mc_values": draw(st.lists(st.sampled_from(SCORES), min_size=L, max_size=L)),
                        "mc_mask": [float(b) for b in draw(st.lists(st.booleans(), min_size=L, max_size=L))],
                        "old_entropies": draw(per_token),
                        "decision_signal": draw(floats),
                        "logged_advantage": draw(st.sampled_from([-1.0, 0.0, 0.5, math.nan])),
                    },
                }
            )
    batch = batch_from_records(records)
    if draw(st.booleans()):
        drop = draw(
            st.lists(
                st.booleans(), min_size=batch.response_mask.numel(), max_size=batch.response_mask.numel()
            )
        )
        holes = torch.tensor(drop, dtype=torch.bool).reshape(batch.response_mask.shape)
        batch = dataclasses.replace(batch, response_mask=batch.response_mask & ~holes, tokens=None)
    return batch
