"""Twin of as_trained.py: the rewards summed per response with their weights, then the group's statistics
of the sum, one response at a time."""

from __future__ import annotations

import math

import torch

from backend.core.batch import RolloutBatch
from backend.estimators.loop_twins import twin
from backend.estimators.methods.as_trained import channel_weights
from backend.estimators.twins.loops import center_scale, real_columns, to_tensor


@twin("as_trained")
def as_trained_twin(batch: RolloutBatch, config) -> torch.Tensor:
    weights = channel_weights(batch, config)
    scores = {c: batch.scores[c].tolist() for c in weights}
    groups = batch.group_ids.tolist()
    B = len(groups)
    summed = []
    for i in range(B):
        present = [weights[c] * scores[c][i] for c in weights if not math.isnan(scores[c][i])]
        summed.append(sum(present) if present else math.nan)
    outcome = "grpo" if config.scale == "group" else "dr_grpo"
    cs = center_scale(summed, groups, outcome, config.epsilon)
    value = []
    for i in range(B):
        center, scale = cs[i]
        if math.isnan(summed[i]):
            value.append(0.0)
        elif not config.term:
            value.append((summed[i] - center) * scale)
        else:  # the term's own centre: the group mean of w_c R_c over the scored members (0 alone)
            c = config.term
            x = [
                0.0 if math.isnan(scores[c][j]) else weights[c] * scores[c][j]
                for j in range(B)
                if groups[j] == groups[i] and not math.isnan(summed[j])
            ]
            alone = groups.count(groups[i]) == 1
            mean = 0.0 if alone else sum(x) / len(x)
            own = 0.0 if math.isnan(scores[c][i]) else weights[c] * scores[c][i]
            value.append((own - mean) * scale)
    rows = real_columns(batch)
    return to_tensor(batch, rows, [[value[i]] * len(cols) for i, cols in enumerate(rows)])
