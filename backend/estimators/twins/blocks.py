"""Twins of blocks.py: block_mean (MPO-style blocks) and value_anchored (VGPO-inspired), one response and
one real token at a time. The base of block_mean is computed by its own twin."""

from __future__ import annotations

import math
import re

import torch

from backend.core.batch import RolloutBatch
from backend.estimators.loop_twins import twin
from backend.estimators.twins.loops import gae_rows, outcome_of, real_columns, scores_list, to_tensor
from backend.estimators.twins.modifiers import base_twin
from backend.estimators.twins.values import value_rows


def block_ids_loop(batch: RolloutBatch, config) -> list[list[int]]:
    """Block number of every real token: k tokens per block, or a new block after each token that holds
    the last character of a `pattern` match (a step end)."""
    out = []
    for i, cols in enumerate(real_columns(batch)):
        ids, block = [], 0
        texts = batch.tokens[i] if batch.tokens is not None else [""] * len(cols)
        ends = [m.end() - 1 for m in re.finditer(config.pattern, "".join(texts)) if m.end() > m.start()]
        before = 0
        for k in range(len(cols)):
            if config.blocks == "fixed":
                ids.append(k // config.k)
                continue
            ids.append(block)
            if any(before <= e < before + len(texts[k]) for e in ends):
                block += 1
            before += len(texts[k])
        out.append(ids)
    return out


@twin("block_mean")
def block_mean_twin(batch: RolloutBatch, config) -> torch.Tensor:
    """Every token gets the mean of the base's advantages over the real tokens of its block."""
    rows = real_columns(batch)
    base = base_twin(batch, config)
    ids = block_ids_loop(batch, config)
    out = []
    for i, cols in enumerate(rows):
        values = [float(base[i, t]) for t in cols]
        row = []
        for k in range(len(cols)):
            same = [values[j] for j in range(len(cols)) if ids[i][j] == ids[i][k]]
            row.append(sum(same) / len(same))
        out.append(row)
    return to_tensor(batch, rows, out)


@twin("value_anchored")
def value_anchored_twin(batch: RolloutBatch, config) -> torch.Tensor:
    """GAE of the terminal Z with the value source's V (gamma, lam), plus w_abs (R - anchor) on every token
    (0 for a response without a score)."""
    rows = real_columns(batch)
    z = outcome_of(batch, config)
    r_rows = [[z[i] if k == len(cols) - 1 else 0.0 for k in range(len(cols))] for i, cols in enumerate(rows)]
    temporal = gae_rows(r_rows, value_rows(batch, config, z, rows), config.gamma, config.lam)
    R = scores_list(batch, config.channel)
    out = []
    for i in range(len(rows)):
        absolute = 0.0 if math.isnan(R[i]) else config.w_abs * (R[i] - config.anchor)
        out.append([a + absolute for a in temporal[i]])
    return to_tensor(batch, rows, out)
