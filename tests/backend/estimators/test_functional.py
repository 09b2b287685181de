"""The functional core against verl-style loop twins (and verl itself when installed)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from backend.estimators import functional as F
from backend.estimators import masked
from backend.estimators.twins.loops import outcome_loop
from backend.estimators.twins.verl import verl_gae_loop, verl_grpo_loop


def _ragged(B, T, seed, holes=False):
    gen = torch.Generator().manual_seed(seed)
    L = torch.randint(1, T + 1, (B,), generator=gen)
    mask = torch.arange(T) < L[:, None]
    if holes:
        mask = mask & (torch.rand(B, T, generator=gen) > 0.25)
    return mask, gen


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_matches_verl_loop(seed, norm_by_std):
    gen = torch.Generator().manual_seed(seed)
    B, T = 23, 7
    mask, _ = _ragged(B, T, seed)
    groups = torch.randint(0, 6, (B,), generator=gen)
    groups[0] = 99  # a singleton group
    scores = torch.randn(B, generator=gen)
    token_rewards = torch.zeros(B, T)
    token_rewards[:, 0] = scores  # verl sums token rewards into the score
    ours = F.compute_grpo(scores, groups, mask, norm_by_std=norm_by_std)
    theirs = verl_grpo_loop(token_rewards, mask.float(), groups.tolist(), norm_adv_by_std_in_grpo=norm_by_std)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_grpo_singleton_and_zero_variance_groups():
    scores = torch.tensor([3.0, 0.1, 0.1, 0.1, 1.0, 2.0])
    groups = torch.tensor([7, 1, 1, 1, 2, 2])
    mask = torch.ones(6, 2, dtype=torch.bool)
    adv = F.compute_grpo(scores, groups, mask)
    assert adv[0].tolist() == [3.0, 3.0]  # singleton: mean 0, std 1
    assert adv[1:4].abs().max().item() == 0.0  # zero variance: exactly 0, not float noise / eps
    assert adv[4, 0].item() < 0 < adv[5, 0].item()


@pytest.mark.parametrize("outcome", ["grpo", "dr_grpo", "rloo"])
def test_outcome_scores_match_formula_loop(outcome):
    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(17, generator=gen)
    groups = torch.randint(0, 5, (17,), generator=gen)
    fast = F.outcome_scores(scores, groups, outcome)
    slow = torch.tensor(outcome_loop(scores.tolist(), groups.tolist(), outcome))
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("T", [1, 2, 63, 64, 65, 130, 4200])
@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.99, 0.95), (1.0, 0.0), (0.0, 0.5)])
def test_gae_matches_verl_loop_with_mid_sequence_masks(T, gamma, lam):
    B = 3 if T > 1000 else 6
    mask, gen = _ragged(B, T, T, holes=True)
    rewards = torch.randn(B, T, generator=gen)
    values = torch.randn(B, T, generator=gen)
    adv, ret = F.compute_gae(rewards, values, mask, gamma, lam)
    adv_loop, ret_loop = verl_gae_loop(rewards, values, mask, gamma, lam)
    atol = 1e-4 if T > 1000 else 1e-5  # float32 sums over thousands of tokens
    torch.testing.assert_close(adv * mask, adv_loop * mask, atol=atol, rtol=1e-5)
    torch.testing.assert_close((ret - values) * mask, (ret_loop - values) * mask, atol=atol, rtol=1e-5)
    assert adv[~mask].abs().sum().item() == 0.0 and ret[~mask].abs().sum().item() == 0.0


def test_gae_terminal_zero_values_gamma_lam_one_is_broadcast():
    mask, _ = _ragged(5, 9, 1)
    z = torch.tensor([1.0, -2.0, 0.5, 0.0, 3.0])
    r = torch.zeros(5, 9)
    last = masked.last_index(mask)
    r[torch.arange(5), last] = z
    adv, _ = F.compute_gae(r, torch.zeros(5, 9), mask, 1.0, 1.0)
    torch.testing.assert_close(adv, masked.broadcast(z, mask))


@pytest.mark.parametrize("discount", [0.0, 0.5, 0.97, 1.0])
def test_reverse_discounted_cumsum_matches_loop(discount):
    x = torch.randn(4, 300, generator=torch.Generator().manual_seed(0))
    y = F.reverse_discounted_cumsum(x, discount, block=16)  # three levels of blocks
    ref = torch.zeros_like(x)
    run = torch.zeros(4)
    for t in reversed(range(300)):
        run = x[:, t] + discount * run
        ref[:, t] = run
    torch.testing.assert_close(y, ref, atol=1e-4, rtol=1e-5)
    with pytest.raises(ValueError, match="1.5"):
        F.reverse_discounted_cumsum(x, 1.5)


def test_redistribute_sums_to_z_and_falls_back():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    w = torch.tensor([[0.0, 1.0, 3.0, 9.0], [0.0, 0.0, 5.0, 5.0]])
    z = torch.tensor([2.0, -1.0])
    adv, r, fallback = F.redistribute(z, w, mask)
    torch.testing.assert_close(r.sum(1), z)
    assert fallback.tolist() == [False, True]
    assert adv[1].tolist() == [-1.0, -1.0, 0.0, 0.0]
    assert adv[0, 3].item() == 0.0


def test_masked_helpers():
    valid = torch.tensor([[0, 1, 0, 0, 1, 0]], dtype=torch.bool)
    assert masked.forward_fill_index(valid).tolist() == [[-1, 1, 1, 1, 4, 4]]
    assert masked.backward_fill_index(valid).tolist() == [[1, 1, 4, 4, 4, 6]]
    assert masked.backward_fill_index(valid, strict=True).tolist() == [[1, 4, 4, 4, 6, 6]]
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    mask = torch.arange(8) < torch.tensor([[8], [3], [1]])
    q = masked.row_quantile(x, mask, 0.8)
    for i in range(3):
        assert abs(q[i, 0].item() - torch.quantile(x[i][mask[i]], 0.8).item()) < 1e-6
    table, g_max = masked.group_slots(torch.tensor([1, 0, 1, 1]), 2)
    assert g_max == 3 and table.tolist() == [[1, -1, -1], [0, 2, 3]]


def test_against_verl_itself():
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    mask, gen = _ragged(8, 33, 5, holes=True)
    rewards, values = torch.randn(8, 33, generator=gen), torch.randn(8, 33, generator=gen)
    mask_f = mask.float()
    adv_v, ret_v = core_algos.compute_gae_advantage_return(rewards, values, mask_f, 0.99, 0.95)
    adv, ret = F.compute_gae(rewards, values, mask, 0.99, 0.95)
    # verl whitens its advantages; returns - values is the advantage before whitening.
    torch.testing.assert_close((ret - values) * mask, (ret_v - values) * mask, atol=1e-5, rtol=1e-5)
    scores = torch.randn(8, generator=gen)
    tr = torch.zeros(8, 33)
    tr[:, 0] = scores
    index = np.array([0, 0, 0, 1, 1, 2, 2, 2])
    grpo_v, _ = core_algos.compute_grpo_outcome_advantage(tr, mask_f, index)
    ours = F.compute_grpo(scores, torch.tensor(index), mask)
    torch.testing.assert_close(ours, grpo_v, atol=1e-5, rtol=1e-5)


@pytest.mark.cuda
def test_cuda_matches_cpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    mask, gen = _ragged(16, 700, 2, holes=True)
    rewards, values = torch.randn(16, 700, generator=gen), torch.randn(16, 700, generator=gen)
    cpu = F.compute_gae(rewards, values, mask, 0.99, 0.95)
    gpu = F.compute_gae(rewards.cuda(), values.cuda(), mask.cuda(), 0.99, 0.95)
    torch.testing.assert_close(gpu[0].cpu(), cpu[0], atol=1e-4, rtol=1e-4)
    groups = torch.randint(0, 4, (16,), generator=gen)
    scores = torch.randn(16, generator=gen)
    torch.testing.assert_close(
        F.compute_grpo(scores.cuda(), groups.cuda(), mask.cuda()).cpu(), F.compute_grpo(scores, groups, mask)
    )


@pytest.mark.parametrize("holes", [False, True])
def test_gae_ignores_garbage_on_masked_positions(holes):
    """Masked positions may hold NaN/inf (the scan works in place and packs raw rewards): no leak."""
    gen = torch.Generator().manual_seed(5)
    B, T = 6, 37
    mask = torch.arange(T) < torch.randint(1, T + 1, (B,), generator=gen)[:, None]
    if holes:
        mask &= torch.rand(B, T, generator=gen) > 0.3
        mask[:, 0] = True
    r, v = torch.randn(B, T, generator=gen), torch.randn(B, T, generator=gen)
    clean = F.compute_gae(r * mask, v * mask, mask, 0.99, 0.9)
    dirty_r = torch.where(mask, r, torch.nan)
    dirty_v = torch.where(mask, v, torch.inf)
    adv, ret = F.compute_gae(dirty_r, dirty_v, mask, 0.99, 0.9)
    assert torch.equal(adv, clean[0]) and torch.equal(ret, clean[1])
    assert adv[~mask].eq(0).all() and ret[~mask].eq(0).all()
    assert torch.equal(dirty_r.isnan(), ~mask)  # inputs untouched
