"""Missing scores (NaN) follow TRL's GRPOTrainer: left out of the group statistics, advantage 0."""

from __future__ import annotations

import math

import pytest
import torch

from backend.core.batch import batch_from_records
from backend.estimators import functional as F
from backend.estimators import registry
from backend.estimators.twins.loops import outcome_loop


def trl_group_advantage(rewards: torch.Tensor, num_generations: int) -> torch.Tensor:
    """TRL 1.16 `_generate_and_score_completions`, scale_rewards="group", one reward column: nanmean,
    TRL's own `nanstd`, / (std + 1e-4), NaN -> 0."""
    from trl.trainer.utils import nanstd  # noqa: PLC0415 - optional: TRL

    grouped = rewards.view(-1, num_generations)
    mean = torch.nanmean(grouped, dim=1).repeat_interleave(num_generations)
    std = nanstd(grouped, dim=1).repeat_interleave(num_generations)
    return torch.nan_to_num((rewards - mean) / (std + 1e-4), nan=0.0)


@pytest.mark.parametrize("seed", range(5))
def test_grpo_matches_trl_with_missing_scores(seed):
    gen = torch.Generator().manual_seed(seed)
    G, n_groups = 4, 16
    rewards = torch.rand(G * n_groups, generator=gen)
    rewards[torch.rand(G * n_groups, generator=gen) < 0.3] = math.nan
    rewards[:G] = math.nan  # a group without any score
    rewards[G + 1 : 2 * G] = math.nan  # a group with one score: no baseline, TRL's nan std gives 0
    groups = torch.arange(G * n_groups) // G
    ours = F.outcome_scores(rewards, groups, "grpo", 1e-4)
    torch.testing.assert_close(ours, trl_group_advantage(rewards, G), atol=1e-6, rtol=0)
    twin = torch.tensor(outcome_loop(rewards.tolist(), groups.tolist(), "grpo", 1e-4))
    torch.testing.assert_close(ours, twin, atol=1e-5, rtol=1e-5)


def test_a_missing_score_is_never_a_zero_score():
    records = [{"token_ids": [1, 2], "group_id": 0, "scores": {"task": s}} for s in (1.0, 0.0, 1.0)]
    records.append({"token_ids": [3], "group_id": 0, "scores": {}})
    batch = batch_from_records(records)
    assert math.isnan(float(batch.scores["task"][3]))
    adv = registry.estimate("grpo", batch).advantages
    assert adv[3].abs().sum() == 0  # advantage 0 on the channel it has no score on
    # the group mean is over the three scores (2/3), not four with a zero (1/2)
    with_zero = batch_from_records([*records[:3], {**records[3], "scores": {"task": 0.0}}])
    assert not torch.allclose(adv[0, 0], registry.estimate("grpo", with_zero).advantages[0, 0])
    expected = (1.0 - 2 / 3) / (math.sqrt(1 / 3) + 1e-6)
    assert float(adv[0, 0]) == pytest.approx(expected, rel=1e-5)


def test_channel_sum_is_nansum_and_all_nan_stays_unscorable():
    records = [
        {"token_ids": [1], "group_id": 0, "scores": s}
        for s in ({"a": 1.0, "b": 0.5}, {"a": 2.0}, {}, {"b": 1.0})
    ]
    total = batch_from_records(records).with_channel_sum("all").scores["all"]
    assert total[:2].tolist() == [1.5, 2.0] and math.isnan(float(total[2])) and float(total[3]) == 1.0
