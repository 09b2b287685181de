"""Twins of modifiers.py: gtpo, and the modifiers that reshape a base estimator's advantages token by
token (entropy_gate, stare, entropy_drop_mask) or weight them by a loss-aggregation mode (aggregation).
The base is computed by its own twin."""

from __future__ import annotations

import dataclasses
import math

import torch

from backend.core.batch import RolloutBatch
from backend.estimators import loop_twins, registry
from backend.estimators.loop_twins import twin
from backend.estimators.twins.loops import entropy_rows, quantile, real_columns, scores_list, to_tensor


def base_twin(batch: RolloutBatch, config) -> torch.Tensor:
    """The twin of `config.base` with its defaults, sharing channel/outcome/epsilon with the modifier."""
    spec = registry.get(config.base)
    known = {f.name for f in dataclasses.fields(spec.config_cls)}
    shared = {k: getattr(config, k) for k in ("channel", "outcome", "epsilon") if k in known}
    return loop_twins.get_twin(config.base)(batch, spec.config_cls(**shared))


@twin("gtpo")
def gtpo_twin(batch: RolloutBatch, config) -> torch.Tensor:
    """GTPO per group and position, from the paper's Eq. 3, 5 and our reading of Eq. 6."""
    rows = real_columns(batch)
    R = scores_list(batch, config.channel)
    groups = batch.group_ids.tolist()
    H = entropy_rows(batch, rows)
    out = [[0.0] * len(c) for c in rows]
    for g in set(groups):
        mates = [i for i in range(len(R)) if groups[i] == g]
        shaped = {i: [0.0] * len(rows[i]) for i in mates}
        for sign in (1, -1):
            members = [i for i in mates if (R[i] > config.correct_above) == (sign > 0)]
            for t in range(max((len(rows[i]) for i in mates), default=0)):
                alive = [i for i in members if len(rows[i]) > t]
                if sign > 0:
                    vals = {i: H[i][t] for i in alive}
                else:
                    vals = {i: 1.0 / max(H[i][t], config.entropy_floor) for i in alive}
                total = sum(vals.values())
                for i in alive:
                    share = vals[i] / total if total > 0 else 1.0 / len(alive)
                    shaped[i][t] = sign * (config.alpha1 + config.alpha2 * share * len(alive))
            # Eq. 6: this set's shaped rewards, 0 on the other set's tokens, over all tokens of the group
            pool = [shaped[i][t] if i in members else 0.0 for i in mates for t in range(len(rows[i]))]
            if len(pool) < 2:
                continue
            mean = sum(pool) / len(pool)
            std = math.sqrt(sum((x - mean) ** 2 for x in pool) / (len(pool) - 1))
            for i in members:
                out[i] = [(x - mean) / (std + config.epsilon) if std > 0 else 0.0 for x in shaped[i]]
    return to_tensor(batch, rows, out)


@twin("entropy_gate")
def entropy_gate_twin(batch: RolloutBatch, config) -> torch.Tensor:
    """The base advantage times `factor` on tokens at or above the response's entropy q-quantile."""
    rows = real_columns(batch)
    base = base_twin(batch, config)
    H = entropy_rows(batch, rows)
    out = torch.zeros(batch.response_mask.shape)
    for i, cols in enumerate(rows):
        thr = quantile(H[i], config.q) if cols else 0.0
        for k, t in enumerate(cols):
            out[i, t] = base[i, t] * (config.factor if H[i][k] >= thr else 1.0)
    return out


@twin("stare")
def stare_twin(batch: RolloutBatch, config) -> torch.Tensor:
    """The top_p share of positive-advantage tokens with the highest surprisal get `weight` (variant C2:
    negative ones get weight_neg too), only while the batch's mean entropy is below target_entropy."""
    rows = real_columns(batch)
    base = base_twin(batch, config)
    H = entropy_rows(batch, rows)
    n_tok = sum(len(c) for c in rows)
    gate = (sum(map(sum, H)) / max(n_tok, 1)) < config.target_entropy
    weights = {}
    for sign, w in ((1, config.weight), (-1, config.weight_neg if config.variant == "C2" else None)):
        cand = [(i, t) for i, c in enumerate(rows) for t in c if sign * float(base[i, t]) > 0]
        if w is None or not cand or config.top_p <= 0:
            continue
        k = min(max(1, int(len(cand) * config.top_p + 0.999999)), len(cand))
        ranked = sorted(cand, key=lambda it: float(batch.logprobs[it[0], it[1]]))  # highest surprisal first
        for it in ranked[:k]:
            weights[it] = w if gate else 1.0
    out = torch.zeros(batch.response_mask.shape)
    for i, cols in enumerate(rows):
        for t in cols:
            out[i, t] = base[i, t] * weights.get((i, t), 1.0)
    return out


@twin("entropy_drop_mask")
def entropy_drop_mask_twin(batch: RolloutBatch, config) -> torch.Tensor:
    """Positive base advantages scaled by `scale` where the entropy fell below the old policy's."""
    rows = real_columns(batch)
    base = base_twin(batch, config)
    old = batch.extras["old_entropies"]
    out = torch.zeros(batch.response_mask.shape)
    for i, cols in enumerate(rows):
        for t in cols:
            fell = float(batch.entropies[i, t]) < float(old[i, t])
            out[i, t] = base[i, t] * (config.scale if base[i, t] > 0 and fell else 1.0)
    return out


@twin("aggregation")
def aggregation_twin(batch: RolloutBatch, config) -> torch.Tensor:
    """c_i A per token, with c_i the weight of the loss-aggregation mode (times the token count N when
    `normalize`)."""
    rows = real_columns(batch)
    base = base_twin(batch, config)
    B = max(sum(1 for c in rows if c), 1)
    N = sum(len(c) for c in rows)
    budget = config.l_budget or batch.response_mask.shape[1]
    out = torch.zeros(batch.response_mask.shape)
    for i, cols in enumerate(rows):
        c = {
            "seq-mean-token-mean": 1 / (B * max(len(cols), 1)),
            "token-mean": 1 / max(N, 1),
            "seq-mean-token-sum": 1 / B,
            "dr-grpo": 1 / (max(len(rows), 1) * budget),
        }[config.mode]
        for t in cols:
            out[i, t] = base[i, t] * c * (max(N, 1) if config.normalize else 1)
    return out
