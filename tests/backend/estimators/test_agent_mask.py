"""Agent runs (issue 44): every registered estimator on a multi-turn batch whose tool and environment tokens
carry `loss_mask` 0. Masked tokens get exactly 0, stay in the rows, and the trained tokens get what the
same responses with the masked tokens removed get (positions, means, weights, groups and prefix trees
count trained tokens only); the loop twins agree."""

from __future__ import annotations

import random

import pytest
import torch

from backend.core.batch import MODEL_SCORED, BatchError, batch_from_records, model_score_needs
from backend.credit import channels
from backend.estimators import registry
from backend.estimators.reference import reference_advantages

TEXTS = ["a", "b", " ", "\n", "1", ".", "ab", ",", "x\n"]
PER_TOKEN = ("entropies", "logprobs", "ref_logprobs", "values")


def _assistant_record(rng: random.Random, gid: int, rid: int, stem: list[int], flat: bool) -> dict:
    """A response of trained tokens only, with every per-token field an estimator may read."""
    # No response ends where another of its group gets a tool's answer (after token 2 or 5): a prefix-tree
    # node is a prefix of the transcript, tool tokens included (the state the policy acted in), so a
    # response that stops there and one that goes on to a tool's output part at the tool, where without the
    # tool tokens they would share a node (docs/estimators.md, "Agent runs").
    L = rng.choice([3, 4, 6, 7, 8, 9])
    ids = (stem + [rng.randint(1, 4) for _ in range(9)])[:L]
    rec = {
        "token_ids": ids,
        "group_id": gid,
        "rollout_id": rid,
        "scores": {"task": 1.0 if flat else float(rng.random() < 0.5) + 0.1 * rng.random(), "style": -0.5},
        "token_rewards": {"style": [-float(rng.random() < 0.2) for _ in ids]},
        "entropies": [rng.random() * 2 for _ in ids],
        "logprobs": [-rng.random() * 3 for _ in ids],
        "ref_logprobs": [-rng.random() * 3 for _ in ids],
        "values": [rng.gauss(0, 1) for _ in ids],
        "tokens": [TEXTS[i % len(TEXTS)] for i in ids],
        "extras": {
            "mc_values": [rng.random() for _ in ids],
            "mc_mask": [float(rng.random() < 0.4) for _ in ids],
            "decision_signal": [rng.gauss(0, 1) for _ in ids],
            "old_entropies": [rng.random() * 2 for _ in ids],
            "logged_advantage": rng.gauss(0, 1),
        },
        # the same assistant turns as the multi-turn record's, without the tools' outputs between them
        "turns": [{"role": "assistant", "start": a, "end": b} for a, b in _segments(L)],
        "turn_rewards": [rng.choice([None, 0.0, 0.5, 1.0, rng.random()]) for _ in _segments(L)],
    }
    for method in MODEL_SCORED:
        scores_name, mask_name = model_score_needs(method)
        rec["extras"][scores_name] = [rng.choice([0.0, 0.5, rng.gauss(0, 2)]) for _ in ids]
        rec["extras"][mask_name] = [float(rng.random() < 0.8) for _ in ids]
    return rec


def _segments(L: int) -> list[tuple[int, int]]:
    """The assistant turns of a response of L trained tokens: a tool answers after tokens 2 and 5."""
    cuts = [c for c in (2, 5) if c < L]
    return list(zip([0, *cuts], [*cuts, L], strict=True))


def _with_tool_turns(rec: dict, rng: random.Random) -> dict:
    """The same response with tool outputs inserted after some assistant tokens: loss_mask 0 there, and
    numbers on them an estimator would notice (entropy 9, logprob -9, values 50, a newline). A tool's output
    is a function of the transcript before it (as a real tool's is), so responses that share a prefix share
    their tool outputs and a prefix tree has the same branches with or without them."""
    ids = rec["token_ids"]
    out = {
        k: v for k, v in rec.items() if k not in ("token_ids", "tokens", "token_rewards", "extras", "turns")
    }
    full = {"token_ids": [], "tokens": [], "loss_mask": [], "turns": []}
    per_token = {name: [] for name in PER_TOKEN}
    token_rewards = {c: [] for c in rec["token_rewards"]}
    extras = {k: [] for k, v in rec["extras"].items() if isinstance(v, list)}
    start = 0
    for seg_start, seg_end in _segments(len(ids)):
        n0 = len(full["token_ids"])
        full["token_ids"] += ids[seg_start:seg_end]
        full["tokens"] += rec["tokens"][seg_start:seg_end]
        full["loss_mask"] += [1] * (seg_end - seg_start)
        for name in PER_TOKEN:
            per_token[name] += rec[name][seg_start:seg_end]
        for c in token_rewards:
            token_rewards[c] += rec["token_rewards"][c][seg_start:seg_end]
        for k in extras:
            extras[k] += rec["extras"][k][seg_start:seg_end]
        full["turns"].append({"role": "assistant", "start": n0, "end": len(full["token_ids"])})
        if seg_end == len(ids):
            break
        tool = [sum(ids[:seg_end]) % 4 + 1, seg_end % 3 + 1, 4]
        n0 = len(full["token_ids"])
        full["token_ids"] += tool
        full["tokens"] += ["<tool>", "\n", "7"]
        full["loss_mask"] += [0, 0, 0]
        junk = {"entropies": 9.0, "logprobs": -9.0, "ref_logprobs": -0.5, "values": 50.0}
        for name in PER_TOKEN:
            per_token[name] += [junk[name]] * 3
        for c in token_rewards:
            token_rewards[c] += [-3.0] * 3
        for k in extras:
            extras[k] += [1.0 if k.endswith("mask") else 7.0] * 3
        full["turns"].append({"role": "tool", "start": n0, "end": len(full["token_ids"])})
        start = seg_end
    assert start <= len(ids)
    out.update(full, **per_token, token_rewards=token_rewards)
    out["extras"] = {**extras, "logged_advantage": rec["extras"]["logged_advantage"]}
    return out


def agent_records(seed: int = 0, n_groups: int = 4, group_size: int = 4) -> tuple[list[dict], list[dict]]:
    """(multi-turn records with loss_mask and turns, the same responses without their masked tokens)."""
    rng = random.Random(seed)
    compact, full = [], []
    rid = 0
    for g in range(n_groups):
        stem = [rng.randint(1, 4) for _ in range(rng.randint(0, 5))]
        size = 1 if g == n_groups - 1 else group_size
        for _ in range(size):
            rec = _assistant_record(rng, 10 * g + 3, 100 + rid, stem, flat=g == 0)
            compact.append(rec)
            full.append(_with_tool_turns(rec, rng))
            rid += 1
    return full, compact


NAMES = [n for n in registry.names() if registry.MODEL not in registry.get(n).needs]
# GiGPO groups steps by the observation they act on, which on a response is the tool's output before the
# turn: without those tokens its anchor groups are different ones, so the compact batch is no reference.
READS_TOOL_OUTPUT = {"gigpo"}


def _runs(name, batch):
    try:
        return registry.estimate(name, batch)
    except BatchError:
        return None


@pytest.mark.parametrize("seed", [0, 1])
def test_every_estimator_gives_masked_tokens_zero_and_trained_tokens_their_unmasked_credit(seed):
    full_records, compact_records = agent_records(seed)
    full = batch_from_records(full_records)
    compact = batch_from_records(compact_records)
    masked_out = full.response_mask & ~full.loss_mask
    assert int(masked_out.sum()) > 10
    ran = []
    for name in NAMES:
        result = _runs(name, full)
        if result is None:
            assert _runs(name, compact) is None, name
            continue
        ran.append(name)
        adv = result.advantages
        assert adv.shape == full.response_mask.shape  # masked tokens stay in the rows
        assert torch.equal(adv[masked_out], torch.zeros(int(masked_out.sum()))), name
        expected = registry.estimate(name, compact).advantages[compact.response_mask]
        if name not in READS_TOOL_OUTPUT:
            torch.testing.assert_close(
                adv[full.trained_mask], expected, atol=2e-5, rtol=1e-4, msg=lambda m, n=name: f"{n}: {m}"
            )
        slow = reference_advantages(name, full)
        assert torch.equal(slow[masked_out], torch.zeros(int(masked_out.sum()))), f"{name} twin"
        torch.testing.assert_close(adv, slow, atol=2e-5, rtol=1e-4, msg=lambda m, n=name: f"{n} twin: {m}")
    assert len(ran) >= 25, ran


def test_channel_projections_and_normalization_skip_masked_tokens():
    full_records, compact_records = agent_records(3)
    full = batch_from_records(full_records)
    compact = batch_from_records(compact_records)
    masked_out = full.response_mask & ~full.loss_mask
    for projection in ("kl", "span", "broadcast", "length", "process"):
        spec = channels.ChannelSpec(name="style", projection=projection, normalization="group")
        got = channels.normalize(channels.project_channel(full, spec), full, "group")
        want = channels.normalize(channels.project_channel(compact, spec), compact, "group")
        assert torch.equal(got[masked_out], torch.zeros(int(masked_out.sum()))), projection
        torch.testing.assert_close(got[full.trained_mask], want[compact.response_mask], msg=projection)


def test_a_batch_without_loss_mask_is_unchanged():
    full_records, _ = agent_records(0)
    for rec in full_records:
        del rec["loss_mask"]
    batch = batch_from_records(full_records)
    assert batch.loss_mask is None and batch.trained() is batch
    adv = registry.estimate("grpo", batch).advantages
    assert bool((adv[batch.response_mask] != 0).any())
