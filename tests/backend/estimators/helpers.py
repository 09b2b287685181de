"""Random batches for the estimator tests: ragged lengths, mid-sequence masks, singleton and
zero-variance groups, length-1 responses, shared prefixes (so prefix trees branch)."""

from __future__ import annotations

import dataclasses
import math
import random

import torch

from backend.core.batch import MODEL_SCORED, RolloutBatch, batch_from_records, model_score_needs

TEXTS = ["a", "b", " ", "\n", "1", ".", "ab", ",", "x\n"]


def random_batch(
    seed: int = 0,
    n_groups: int = 4,
    group_size: int = 4,
    max_len: int = 10,
    holes: bool = False,
    singleton: bool = True,
    flat_group: bool = True,
    vocab: int = 4,
    extras: bool = True,
) -> RolloutBatch:
    rng = random.Random(seed)
    gaps = random.Random(seed + 1000)  # missing scores and logged advantages: their own stream
    model_scores = random.Random(seed + 2000)  # cached OAR / GCPO scores: their own stream too
    records = []
    rid = 0
    for g in range(n_groups):
        size = 1 if (singleton and g == n_groups - 1 and n_groups > 1) else group_size
        stem = [rng.randint(1, vocab) for _ in range(rng.randint(0, max_len // 2))]
        flat = flat_group and g == 0
        for _ in range(size):
            L = rng.choice([1, rng.randint(1, max_len)])
            ids = (stem + [rng.randint(1, vocab) for _ in range(max_len)])[:L]
            rec = {
                "token_ids": ids,
                "group_id": 10 * g + 3,
                "rollout_id": 100 + rid,
                "scores": {
                    "task": 1.0 if flat else float(rng.random() < 0.5) + 0.1 * rng.random(),
                    "style": -float(rng.random() < 0.3),
                },
                "token_rewards": {"style": [-float(rng.random() < 0.2) for _ in ids]},
                "entropies": [rng.random() * 2 for _ in ids],
                "logprobs": [-rng.random() * 3 for _ in ids],
                "ref_logprobs": [-rng.random() * 3 for _ in ids],
                "values": [rng.gauss(0, 1) for _ in ids],
                "tokens": [TEXTS[i % len(TEXTS)] for i in ids],
            }
            if gaps.random() < 0.2:
                del rec["scores"]["style"]  # a missing score: NaN in the batch (TRL's None)
            if extras:
                rec["extras"] = {
                    "mc_values": [rng.random() for _ in ids],
                    "mc_mask": [float(rng.random() < 0.3) for _ in ids],
                    "decision_signal": [rng.gauss(0, 1) for _ in ids],
                    "old_entropies": [rng.random() * 2 for _ in ids],
                    "logged_advantage": gaps.gauss(0, 1) if gaps.random() < 0.9 else math.nan,
                }
                for method in MODEL_SCORED:  # scores on some tokens (ties included), mask 0/1
                    scores_name, mask_name = model_score_needs(method)
                    rec["extras"][scores_name] = [
                        model_scores.choice([0.0, 0.5, model_scores.gauss(0, 2)]) for _ in ids
                    ]
                    rec["extras"][mask_name] = [float(model_scores.random() < 0.8) for _ in ids]
            records.append(rec)
            rid += 1
    batch = batch_from_records(records)
    if holes:
        gen = torch.Generator().manual_seed(seed)
        drop = torch.rand(batch.response_mask.shape, generator=gen) < 0.2
        keep_first = torch.zeros_like(drop)
        keep_first[:, 0] = True  # never empty a response
        mask = batch.response_mask & (~drop | keep_first)
        batch = dataclasses.replace(batch, response_mask=mask, tokens=None)
    return batch
