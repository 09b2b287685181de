"""Turn-level credit (issue 44): `progress_advantage` (deeplearning-wisc/progress-advantage) and `turn_credit`
(prime-rl's TurnCreditAlgorithm). The turn_credit cases are those of prime-rl's own tests
(tests/unit/orchestrator/test_turn_credit.py at 510fde36c3472ce884a3523e8969da4f9c6f897d), each on a batch."""

from __future__ import annotations

import pytest
import torch

from backend.core.batch import batch_from_records
from backend.estimators import registry
from backend.estimators.methods.turn_methods import deltas, smear
from backend.estimators.reference import reference_advantages


def _rollout(i, group, reward, turn_rewards, turn_len=2, tool_len=1):
    """Assistant turns of `turn_len` tokens with a tool's answer of `tool_len` untrained tokens between."""
    ids, mask, turns = [], [], []
    for k in range(len(turn_rewards)):
        if k:
            turns.append({"role": "tool", "start": len(ids), "end": len(ids) + tool_len})
            ids += [9] * tool_len
            mask += [0] * tool_len
        turns.append({"role": "assistant", "start": len(ids), "end": len(ids) + turn_len})
        ids += [1 + k] * turn_len
        mask += [1] * turn_len
    n = len(ids)
    return {
        "token_ids": ids,
        "group_id": group,
        "rollout_id": i,
        "scores": {"task": reward},
        "loss_mask": mask,
        "turns": turns,
        "turn_rewards": turn_rewards,
        "logprobs": [-0.1 * (t + 1) for t in range(n)],
        "ref_logprobs": [-0.3 - 0.05 * t for t in range(n)],
    }


def _run(rewards, turn_rewards, **config):
    batch = batch_from_records(
        [_rollout(i, 0, r, s) for i, (r, s) in enumerate(zip(rewards, turn_rewards, strict=True))]
    )
    adv = registry.estimate("turn_credit", batch, **config).advantages
    torch.testing.assert_close(
        adv, reference_advantages("turn_credit", batch, registry.make_config("turn_credit", **config))
    )
    return batch, adv


def _per_turn(batch, adv, row):
    return [float(adv[row, start]) for role, start, _ in batch.turns[row] if role == "assistant"]


def _level(batch, adv, row):
    trained = batch.trained_mask[row]
    return float(adv[row][trained].sum() / trained.sum())


def test_deltas_and_smear_are_prime_rls():
    assert deltas([1.0, 3.0, 2.0]) == [0.0, 2.0, -1.0]
    assert deltas([1.0, None, 4.0]) == [0.0, 0.0, 3.0]
    assert deltas([None, None]) == [0.0, 0.0]
    for gamma in (0.0, 0.5, 0.9, 1.0):
        assert sum(smear([0.0, 2.0, -1.0, 0.5], gamma)) == pytest.approx(1.5)  # conserved mass
    assert smear([0.0, 2.0, -1.0], 0.0) == pytest.approx([0.0, 2.0, -1.0])
    assert smear([0.0, 0.0, 3.0], 1.0) == pytest.approx([1.0, 1.0, 1.0])
    credits = smear([0.0, 0.0, 1.0], 0.5)
    assert credits[2] > credits[1] > credits[0] > 0.0


def test_beta_zero_is_the_level_and_untrained_tokens_get_zero():
    batch, adv = _run([1.0, 0.0], [[0.0, 0.5, 1.0], [0.0, 0.2, 0.0]], beta=0.0)
    assert _per_turn(batch, adv, 0) == pytest.approx([1.0] * 3) and _per_turn(batch, adv, 1) == [-1.0] * 3
    assert adv[~batch.trained_mask].abs().sum() == 0


def test_missing_turn_rewards_is_grpo_without_std():
    """prime-rl's GRPO: reward minus the group mean, no std; on every trained token."""
    records = [{**_rollout(i, 0, r, [0.0, 0.0]), "turn_rewards": None} for i, r in enumerate([1.0, 0.0])]
    batch = batch_from_records(records)
    adv = registry.estimate("turn_credit", batch).advantages
    assert _level(batch, adv, 0) == pytest.approx(0.5) and _level(batch, adv, 1) == pytest.approx(-0.5)
    assert adv[~batch.trained_mask].abs().sum() == 0


def test_total_advantage_is_the_level():
    batch, adv = _run([1.0, 0.0], [[0.0, 1.0, 0.5], [0.5, 0.5, 0.5]])
    returns = [1.5, 0.0]
    for row, ret in enumerate(returns):
        n = int(batch.trained_mask[row].sum())
        assert float(adv[row].sum()) == pytest.approx((ret - 0.75) * n, abs=1e-5)


def test_shaping_orders_turns_and_a_group_of_one_trains_on_it():
    batch, adv = _run([0.0], [[0.0, 0.0, 1.0]], gamma=0.5)
    turns = _per_turn(batch, adv, 0)
    assert turns[2] > turns[1] > turns[0]
    batch, adv = _run([1.0], [[0.0, 1.0]])
    turns = _per_turn(batch, adv, 0)
    assert turns[1] > 0.0 > turns[0] and float(adv.sum()) == pytest.approx(0.0, abs=1e-6)


def test_loitering_earns_nothing_spikes_net_zero_and_sparse_scores_match_dense():
    batch, adv = _run([0.0, 0.0], [[1.0, 1.0, 1.0], [0.0, 0.0, 1.0]])
    assert _level(batch, adv, 1) > _level(batch, adv, 0)
    batch, adv = _run([0.0, 0.0], [[0.0, 5.0, 0.0], [0.0, 0.0, 0.0]])
    assert _level(batch, adv, 0) == pytest.approx(_level(batch, adv, 1), abs=1e-6)
    batch, adv = _run([0.0, 0.0], [[0.0, 0.3, 0.6, 1.0], [0.0, None, None, 1.0]])
    assert _level(batch, adv, 0) == pytest.approx(_level(batch, adv, 1), abs=1e-6)


def test_uniform_reward_group_still_trains():
    batch, adv = _run([1.0, 1.0], [[0.0, 1.0], [0.0, 0.0]])
    assert bool((adv[0] != 0).any())


@pytest.mark.parametrize("agg", ["mean", "sum", "last", "min", "max"])
def test_progress_advantage_is_beta_times_the_turns_aggregated_log_ratio(agg):
    records = [_rollout(i, 0, 1.0, [None, None, None], turn_len=3) for i in range(2)]
    batch = batch_from_records(records)
    adv = registry.estimate("progress_advantage", batch, beta=2.0, token_agg=agg).advantages
    fn = {"mean": lambda x: sum(x) / len(x), "sum": sum, "last": lambda x: x[-1], "min": min, "max": max}[agg]
    for row, rec in enumerate(records):
        for turn in rec["turns"]:
            cols = range(turn["start"], turn["end"])
            if turn["role"] != "assistant":
                assert all(float(adv[row, t]) == 0.0 for t in cols)
                continue
            want = 2.0 * (fn([rec["logprobs"][t] for t in cols]) - fn([rec["ref_logprobs"][t] for t in cols]))
            assert [float(adv[row, t]) for t in cols] == pytest.approx([want] * 3, abs=1e-6)
    torch.testing.assert_close(
        adv,
        reference_advantages(
            "progress_advantage", batch, registry.make_config("progress_advantage", beta=2.0, token_agg=agg)
        ),
    )
