"""The turn-level estimators against their official code's outputs (issue 44): prime-rl's turn credit
(`fixtures/official/turn_credit_prime_rl.json`), Progress Advantage's `per_step_progress_advantage`
(`progress_advantage.json`) and verl-agent's GiGPO (`gigpo.json`), each written by the script of the same
name in scripts/official_fixtures/ from the cited commit. The fixtures' turns become a batch with the tool
tokens untrained; every assertion is on every token, tool tokens (exactly 0) included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from backend.core.batch import batch_from_records
from backend.estimators import registry
from backend.estimators.reference import reference_advantages

OFFICIAL = Path(__file__).parent / "fixtures" / "official"
FIXTURES = {
    name: json.loads((OFFICIAL / f"{name}.json").read_text())
    for name in ("turn_credit_prime_rl", "progress_advantage", "gigpo")
}
ESTIMATOR = {
    "turn_credit_prime_rl": "turn_credit",
    "progress_advantage": "progress_advantage",
    "gigpo": "gigpo",
}


def _record(rollout_id, group, reward, turns, **fields):
    """A response from (role, ids, values) turns: assistant turns trained, the others not."""
    ids, mask, spans, values = [], [], [], []
    for role, turn_ids, turn_values in turns:
        spans.append({"role": role, "start": len(ids), "end": len(ids) + len(turn_ids)})
        ids += turn_ids
        mask += [int(role == "assistant")] * len(turn_ids)
        values += turn_values
    return {
        "token_ids": ids,
        "group_id": group,
        "rollout_id": rollout_id,
        "scores": {"task": reward},
        "loss_mask": mask,
        "turns": spans,
        **fields,
    }, values


def _check(name, records, expected, **config):
    batch = batch_from_records(records)
    adv = registry.estimate(ESTIMATOR[name], batch, **config).advantages
    want = torch.zeros_like(adv)
    for i, row in enumerate(expected):
        want[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
    torch.testing.assert_close(adv, want, atol=1e-6, rtol=0)
    twin = reference_advantages(ESTIMATOR[name], batch, registry.make_config(ESTIMATOR[name], **config))
    torch.testing.assert_close(twin, adv, atol=1e-5, rtol=1e-5)
    assert (adv[batch.response_mask & ~batch.trained_mask] == 0).all()
    return adv


@pytest.mark.parametrize("case", range(len(FIXTURES["turn_credit_prime_rl"]["cases"])))
def test_turn_credit_equals_prime_rl(case):
    entry = FIXTURES["turn_credit_prime_rl"]["cases"][case]
    records, expected = [], []
    for i, r in enumerate(entry["rollouts"]):
        turns = [
            (role, [1 + k] * n, [1.0 if role == "assistant" else 0.0] * n)
            for k, (role, n) in enumerate(r["turns"])
        ]
        record, trained = _record(i, 0, r["reward"], turns, turn_rewards=r["turn_rewards"])
        assigned = r["assigned"]  # a scalar is the level, on every trained token
        records.append(record)
        expected.append([assigned * m for m in trained] if isinstance(assigned, float) else assigned)
    _check("turn_credit_prime_rl", records, expected, gamma=entry["gamma"], beta=entry["beta"])


@pytest.mark.parametrize("case", range(len(FIXTURES["progress_advantage"]["cases"])))
def test_progress_advantage_equals_official(case):
    entry = FIXTURES["progress_advantage"]["cases"][case]
    turns, expected, k = [], [], 0
    for message in entry["messages"]:
        if message[0] == "assistant":
            turns.append(("assistant", [2] * len(message[1]), [message[1], message[2]]))
            expected += [entry["per_step"][k]] * len(message[1])
        else:
            turns.append((message[0], [9] * message[1], [[0.0] * message[1], [0.0] * message[1]]))
            expected += [0.0] * message[1]
        k += 1
    ids = [t for _, turn_ids, _ in turns for t in turn_ids]
    record, _ = _record(0, 0, 1.0, [(role, turn_ids, [0.0] * len(turn_ids)) for role, turn_ids, _ in turns])
    record["logprobs"] = [v for _, _, (lp, _) in turns for v in lp]
    record["ref_logprobs"] = [v for _, _, (_, ref) in turns for v in ref]
    assert len(record["logprobs"]) == len(ids)
    _check("progress_advantage", [record], [expected], beta=entry["beta"], token_agg=entry["token_agg"])


@pytest.mark.parametrize("case", range(len(FIXTURES["gigpo"]["cases"])))
def test_gigpo_equals_verl_agent(case):
    """A step on observation "a" follows a tool turn whose ids spell it; the first acts on the prompt."""
    entry = FIXTURES["gigpo"]["cases"][case]
    official = iter(entry["advantages"])  # one row per step, trajectories in order
    records, expected = [], []
    for i, (reward, steps) in enumerate(entry["group"]):
        turns, row = [], []
        for k, (observation, n) in enumerate(steps):
            if k:
                obs_ids = [ord(c) for c in observation] * 2
                turns.append(("tool", obs_ids, [0.0] * len(obs_ids)))
                row += [0.0] * len(obs_ids)
            turns.append(("assistant", [1] * n, [1.0] * n))
            step_row = next(official)
            assert len(step_row) == n
            row += step_row
        records.append(_record(i, 0, reward, turns)[0])
        expected.append(row)
    _check(
        "gigpo",
        records,
        expected,
        gamma=entry["gamma"],
        step_advantage_w=entry["step_advantage_w"],
        mode=entry["mode"],
    )


def test_turn_fixtures_cite_the_estimators_commit():
    for name, entry in FIXTURES.items():
        assert entry["commit"] == entry["cited_commit"], name
        assert entry["commit"] in registry.get(ESTIMATOR[name]).source, name
    assert "langfengQ/verl-agent" in registry.get("gigpo").source
    modes = {case["mode"] for case in FIXTURES["gigpo"]["cases"]}
    assert modes == {"mean_norm", "mean_std_norm"}
    # the step term is not idle: on a case with repeated observations it moves some token off the episode term
    case = FIXTURES["gigpo"]["cases"][0]
    assert len({round(row[0], 6) for row in case["advantages"]}) > len({r for r, _ in case["group"]})
