"""Slow twins of the block and value-anchored estimators and of gae's VAPO / VC-PPO options: plain loops
over each response's real tokens, written from the formulas in the estimators' descriptions.

Nothing here is fast; tests compare these with `blocks.py` and `valued.py` on random batches.
"""

from __future__ import annotations

import math
import re

import torch

from backend.estimators.modifiers import base_config
from backend.estimators.reference import (
    _gae_rows,
    _rows,
    _to_tensor,
    _values_rows,
    _z,
    reference_advantages,
)


def actor_lambda_loop(config, length: int) -> float:
    """The advantage's lambda of a response with `length` real tokens (VAPO: 1 - 1/(alpha l), at least 0)."""
    if getattr(config, "lam_mode", "fixed") == "fixed":
        return config.lam
    return max(0.0, 1.0 - 1.0 / (config.alpha * max(length, 1)))


def gae_loop(batch, config) -> tuple[torch.Tensor, torch.Tensor]:
    """gae's advantages and returns (the value targets), one response at a time."""
    rows = _rows(batch)
    z = _z(batch, config)
    r_rows = [[z[i] if k == len(c) - 1 else 0.0 for k in range(len(c))] for i, c in enumerate(rows)]
    v_rows = _values_rows(batch, config, z, rows)
    adv, ret = [], []
    for i, c in enumerate(rows):
        lam = actor_lambda_loop(config, len(c))
        a = _gae_rows(batch, [r_rows[i]], [v_rows[i]], config.gamma, lam)[0]
        adv.append(a)
        if getattr(config, "decoupled", False):
            a = _gae_rows(batch, [r_rows[i]], [v_rows[i]], config.gamma, config.critic_lam)[0]
        ret.append([x + v for x, v in zip(a, v_rows[i], strict=True)])
    return _to_tensor(batch, rows, adv), _to_tensor(batch, rows, ret)


def block_ids_loop(batch, config) -> list[list[int]]:
    """Block number of every real token: k tokens per block, or a new block after each step end."""
    out = []
    for i, cols in enumerate(_rows(batch)):
        ids, block = [], 0
        for k in range(len(cols)):
            if config.blocks == "fixed":
                ids.append(k // config.k)
                continue
            ids.append(block)
            text = "".join(batch.tokens[i]) if batch.tokens is not None else ""
            before = sum(len(x) for x in batch.tokens[i][:k]) if batch.tokens is not None else 0
            here = len(batch.tokens[i][k]) if batch.tokens is not None else 0
            ends_here = any(before <= m.end() - 1 < before + here
                            for m in re.finditer(config.pattern, text) if m.end() > m.start())
            if ends_here:
                block += 1
        out.append(ids)
    return out


def block_mean_loop(batch, config) -> torch.Tensor:
    rows = _rows(batch)
    base = reference_advantages(config.base, batch, base_config(config))
    ids = block_ids_loop(batch, config)
    out = []
    for i, cols in enumerate(rows):
        values = [float(base[i, t]) for t in cols]
        row = []
        for k in range(len(cols)):
            same = [values[j] for j in range(len(cols)) if ids[i][j] == ids[i][k]]
            row.append(sum(same) / len(same))
        out.append(row)
    return _to_tensor(batch, rows, out)


def value_anchored_loop(batch, config) -> torch.Tensor:
    rows = _rows(batch)
    z = _z(batch, config)
    r_rows = [[z[i] if k == len(c) - 1 else 0.0 for k in range(len(c))] for i, c in enumerate(rows)]
    v_rows = _values_rows(batch, config, z, rows)
    temporal = _gae_rows(batch, r_rows, v_rows, config.gamma, config.lam)
    R = batch.scores[config.channel].tolist()
    out = []
    for i in range(len(rows)):
        absolute = 0.0 if math.isnan(R[i]) else config.w_abs * (R[i] - config.anchor)
        out.append([a + absolute for a in temporal[i]])
    return _to_tensor(batch, rows, out)
