"""gae's VAPO / VC-PPO options, block_mean (MPO-style blocks) and value_anchored (VGPO-inspired): twins,
the formulas the descriptions state, and the defaults that must stay equal to before."""

from __future__ import annotations

import pytest
import torch

from backend.core.batch import batch_from_records
from backend.estimators import functional as F
from backend.estimators import registry
from backend.estimators.common import outcome_z
from backend.estimators.reference import reference_advantages
from backend.estimators.token_helpers import token_positions
from backend.estimators.twins.valued import gae_loop

from .helpers import random_batch

VARIANTS = [
    ("gae", {"lam_mode": "length_adaptive", "value_source": "stored"}),
    ("gae", {"lam_mode": "length_adaptive", "alpha": 0.4, "value_source": "prefix_tree", "gamma": 0.9}),
    ("gae", {"decoupled": True, "value_source": "stored", "lam": 0.7}),
    (
        "gae",
        {
            "decoupled": True,
            "critic_lam": 0.5,
            "lam_mode": "length_adaptive",
            "alpha": 0.3,
            "value_source": "zero",
        },
    ),
    ("block_mean", {}),
    ("block_mean", {"k": 3, "base": "entropy"}),
    ("block_mean", {"k": 1, "base": "recency"}),
    ("block_mean", {"blocks": "steps", "base": "entropy_mix"}),
    ("block_mean", {"blocks": "steps", "pattern": "[.,]", "base": "ktae", "outcome": "rloo"}),
    ("value_anchored", {}),
    ("value_anchored", {"value_source": "stored", "w_abs": 0.5, "anchor": 0.0}),
    ("value_anchored", {"value_source": "zero", "outcome": "dr_grpo", "w_abs": 0.0}),
    ("value_anchored", {"value_source": "stored", "lam": 0.8, "gamma": 0.9}),
]


@pytest.mark.parametrize("name,overrides", VARIANTS)
@pytest.mark.parametrize("seed,holes", [(7, False), (8, True)])
def test_fast_equals_twin(name, overrides, seed, holes):
    batch = random_batch(seed, holes=holes)
    config = registry.make_config(name, **overrides)
    fast = registry.estimate(name, batch, config).advantages
    torch.testing.assert_close(fast, reference_advantages(name, batch, config), atol=2e-5, rtol=1e-4)
    assert fast[~batch.response_mask].abs().sum().item() == 0.0


@pytest.mark.parametrize("holes", [False, True])
def test_gae_returns_equal_the_twin(holes):
    batch = random_batch(5, holes=holes)
    for overrides in (
        {"value_source": "stored"},
        {"value_source": "stored", "decoupled": True},
        {"value_source": "stored", "decoupled": True, "lam_mode": "length_adaptive"},
    ):
        config = registry.make_config("gae", **overrides)
        fast = registry.estimate("gae", batch, config).diagnostics["returns"]
        torch.testing.assert_close(
            torch.where(batch.response_mask, fast, 0.0), gae_loop(batch, config)[1], atol=2e-5, rtol=1e-4
        )


@pytest.mark.parametrize("discount_seed", [0, 1])
def test_per_row_scan_matches_a_loop(discount_seed):
    gen = torch.Generator().manual_seed(discount_seed)
    x = torch.randn(6, 300, generator=gen, dtype=torch.float64)  # > 16 * 16: three levels of blocks
    d = torch.tensor([0.0, 1.0, 0.5, 0.99, 0.9, 0.3], dtype=torch.float64)
    y = F.reverse_discounted_cumsum_rows(x, d, block=16)
    expect = torch.zeros_like(x)
    for b in range(6):
        running = 0.0
        for t in reversed(range(300)):
            running = float(x[b, t]) + float(d[b]) * running
            expect[b, t] = running
    torch.testing.assert_close(y, expect, atol=1e-9, rtol=1e-9)
    with pytest.raises(ValueError, match="discounts must be in"):
        F.reverse_discounted_cumsum_rows(x, d + 0.5)


def test_defaults_are_unchanged_and_the_adaptive_lambda_is_vapos():
    """lam_mode=fixed is the old gae; length_adaptive is fixed gae with lam = 1 - 1/(alpha L) row by row."""
    batch = random_batch(2, max_len=40)
    before = F.compute_gae(*_terminal(batch), batch.response_mask, 1.0, 0.95)[0]
    torch.testing.assert_close(registry.estimate("gae", batch, value_source="stored").advantages, before)
    result = registry.estimate("gae", batch, value_source="stored", lam_mode="length_adaptive", alpha=0.1)
    L = batch.response_mask.sum(1).double()
    lam = (1 - 1 / (0.1 * L)).clamp(min=0)
    torch.testing.assert_close(result.diagnostics["lam_actor"].double(), lam, atol=1e-6, rtol=0)
    assert bool((lam[L < 10] == 0).all()) and bool((lam[L > 10] > 0).all())  # clamped below 1/alpha
    for i in range(batch.B):
        row = F.compute_gae(*_terminal(batch), batch.response_mask, 1.0, float(lam[i]))[0][i]
        torch.testing.assert_close(result.advantages[i], row, atol=1e-6, rtol=1e-5)
    short = L < 10  # lambda 0: one-step TD, A_t = delta_t = r_t + V_{t+1} - V_t
    r, v = _terminal(batch)
    v_next = torch.cat([v[:, 1:], torch.zeros_like(v[:, :1])], dim=1)
    delta = torch.where(batch.response_mask, r + v_next - v, 0.0)
    torch.testing.assert_close(result.advantages[short], delta[short], atol=1e-6, rtol=1e-5)


def test_decoupled_changes_the_value_targets_not_the_advantage():
    batch = random_batch(4, max_len=20)  # no holes: V_next is the next column
    plain = registry.estimate("gae", batch, value_source="stored", lam=0.8)
    split = registry.estimate("gae", batch, value_source="stored", lam=0.8, decoupled=True)
    torch.testing.assert_close(split.advantages, plain.advantages)
    # critic lambda 1, gamma 1, terminal reward Z: the value target of every token is Z itself
    z = split.diagnostics["Z"]
    target = torch.where(batch.response_mask, z[:, None].expand_as(batch.response_mask), 0.0)
    torch.testing.assert_close(
        torch.where(batch.response_mask, split.diagnostics["returns"], 0.0), target, atol=1e-5, rtol=1e-5
    )
    assert not torch.allclose(plain.diagnostics["returns"], split.diagnostics["returns"])
    assert split.diagnostics["lam_critic"] == 1.0 and "lam_critic" not in plain.diagnostics


def test_block_mean_pools_within_blocks():
    batch = random_batch(3, max_len=12)
    mask = batch.response_mask
    base = registry.estimate("entropy", batch).advantages
    assert torch.equal(registry.estimate("block_mean", batch, base="entropy", k=1).advantages, base)
    pooled = registry.estimate("block_mean", batch, base="entropy", k=4)
    block = pooled.diagnostics["block"]
    for i in range(batch.B):
        for b in block[i][mask[i]].unique().tolist():
            members = mask[i] & (block[i] == b)
            assert members.sum() <= 4
            torch.testing.assert_close(
                pooled.advantages[i][members].sum(), base[i][members].sum(), atol=1e-5, rtol=1e-5
            )  # the block's total push is kept
            assert torch.allclose(pooled.advantages[i][members], pooled.advantages[i][members][0])
    # an outcome-only base has one value per response: pooling it is broadcast (MPO's ratio is in the loss)
    torch.testing.assert_close(
        registry.estimate("block_mean", batch, base="grpo").advantages,
        registry.estimate("grpo", batch).advantages,
    )


def test_block_mean_steps_end_at_newlines():
    tokens = ["1", "+", "2", "\n", "=", "3", "\n", "ok"]
    batch = batch_from_records(
        [
            {
                "token_ids": list(range(1, 9)),
                "tokens": tokens,
                "group_id": 0,
                "rollout_id": i,
                "scores": {"task": float(i)},
                "entropies": [0.1 * (k + 1) for k in range(8)],
            }
            for i in range(2)
        ]
    )
    result = registry.estimate("block_mean", batch, base="entropy", blocks="steps")
    assert result.diagnostics["block"][0].tolist() == [0, 0, 0, 0, 1, 1, 1, 2]
    base = registry.estimate("entropy", batch).advantages[1]
    torch.testing.assert_close(result.advantages[1, :4], base[:4].mean().expand(4))
    torch.testing.assert_close(result.advantages[1, 7], base[7])


def test_value_anchored_temporal_part_is_gae_with_lambda_one_and_keeps_flat_groups():
    batch = random_batch(6)
    for source in ("stored", "prefix_tree"):
        anchored = registry.estimate("value_anchored", batch, value_source=source, w_abs=0.0).advantages
        z = registry.estimate("grpo", batch).advantages
        values = registry.estimate("value_anchored", batch, value_source=source).diagnostics["values"]
        torch.testing.assert_close(
            anchored, torch.where(batch.response_mask, z - values, 0.0), atol=1e-5, rtol=1e-5
        )  # gamma = lam = 1: Z - V(s_t)
        gae = registry.estimate("gae", batch, value_source=source, gamma=1.0, lam=1.0).advantages
        torch.testing.assert_close(anchored, gae, atol=1e-5, rtol=1e-5)
    # group 0 of random_batch is flat (every R = 1): GRPO gives 0 there; the absolute anchor does not
    flat = batch.group_ids == batch.group_ids[0]
    result = registry.estimate("value_anchored", batch, w_abs=0.2, anchor=0.5)
    assert registry.estimate("grpo", batch).advantages[flat].abs().sum() == 0
    expect = torch.where(batch.response_mask[flat], 0.2 * (1.0 - 0.5), 0.0)
    torch.testing.assert_close(result.advantages[flat], expect)


def test_configs_validate_and_declare_scope():
    for name, key, bad in (
        ("gae", "lam_mode", "adaptive"),
        ("gae", "alpha", 0.0),
        ("gae", "critic_lam", 1.5),
        ("block_mean", "k", 0),
        ("block_mean", "blocks", "words"),
        ("block_mean", "base", "stare"),
        ("value_anchored", "w_abs", -1.0),
    ):
        with pytest.raises(ValueError, match=key):
            registry.make_config(name, **{key: bad})
    assert registry.get("block_mean").scope_for(registry.make_config("block_mean")) == "group"
    assert registry.get("block_mean").scope_for(registry.make_config("block_mean", base="token_rm")) == "run"
    assert registry.get("value_anchored").scope_for(registry.make_config("value_anchored")) == "group"
    assert (
        registry.get("value_anchored").scope_for(
            registry.make_config("value_anchored", value_source="fitted")
        )
        == "run"
    )
    assert "2504.05118" in registry.get("gae").source and registry.get("block_mean").source == ""


def _terminal(batch):
    """(r, V): the terminal reward Z on each response's last real token, and the stored values."""
    t, L = token_positions(batch)
    z = outcome_z(batch, registry.make_config("gae"))
    r = torch.where((t == L) & batch.response_mask, z[:, None], 0.0)
    return r, torch.where(batch.response_mask, batch.values, 0.0)
