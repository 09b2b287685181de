"""Split channels: projection, normalization, combine, mixed baseline, dual ascent."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from backend.core.batch import BatchError
from backend.credit import channels as C
from backend.estimators import registry
from tests.backend.estimators.helpers import random_batch


def test_default_specs_cover_the_batch():
    batch = random_batch(0)
    specs = C.default_specs(batch)
    assert specs["task"].projection == "estimator"
    assert specs["style"].projection == "span"  # token rewards present
    assert specs["kl"].projection == "kl"
    no_local = dataclasses.replace(batch, token_rewards={})
    assert C.default_specs(no_local)["style"].projection == "broadcast"


def test_combine_contributions_sum_exactly_and_padding_zero():
    batch = random_batch(1, holes=True)
    specs = C.default_specs(batch)
    res = C.combine(batch, specs)
    total = torch.zeros_like(res.final)
    for name in specs:
        total = total + res.contributions[name]
    assert torch.equal(total, res.final)
    assert res.final[~batch.response_mask].abs().sum() == 0
    torch.testing.assert_close(res.per_channel["task"], registry.estimate("grpo", batch).advantages)


def test_span_puts_the_penalty_where_the_evidence_is():
    batch = random_batch(2)
    style = C.project_channel(batch, C.ChannelSpec("style", "span", normalization="none"))
    local = batch.token_rewards["style"]
    assert torch.equal(style, torch.where(batch.response_mask, local, 0.0))
    assert (style[local == 0] == 0).all()  # never broadcast
    with pytest.raises(BatchError, match="cannot be a span"):
        C.project_channel(dataclasses.replace(batch, token_rewards={}), C.ChannelSpec("style", "span"))


def test_kl_length_process_broadcast_projections():
    batch = random_batch(3)
    mask = batch.response_mask
    kl = C.project_channel(batch, C.ChannelSpec("kl", "kl"))
    torch.testing.assert_close(kl, torch.where(mask, batch.ref_logprobs - batch.logprobs, 0.0))
    scores = dict(batch.scores, length=-torch.ones(batch.B), process=torch.ones(batch.B))
    b2 = dataclasses.replace(batch, scores=scores)
    length = C.project_channel(b2, C.ChannelSpec("length", "length"))
    torch.testing.assert_close(length.sum(1), -torch.ones(batch.B))  # the score, on the tail only
    process = C.project_channel(b2, C.ChannelSpec("process", "process"))
    torch.testing.assert_close(process.sum(1), torch.ones(batch.B))
    flat = C.project_channel(b2, C.ChannelSpec("process", "broadcast"))
    assert torch.equal(flat, torch.where(mask, 1.0, 0.0))


@pytest.mark.parametrize("mode", ["group", "batch", "none"])
def test_normalize(mode):
    batch = random_batch(4, singleton=False, flat_group=False)
    x = torch.randn(batch.B, batch.T, generator=torch.Generator().manual_seed(0))
    out = C.normalize(x, batch, mode)
    mask = batch.response_mask
    assert out[~mask].abs().sum() == 0
    if mode == "batch":
        assert abs(out[mask].mean().item()) < 1e-5 and abs(out[mask].std().item() - 1) < 1e-3
    if mode == "group":
        for g in batch.group_ids.unique():
            sel = mask & (batch.group_ids == g)[:, None]
            if sel.sum() > 1:
                assert abs(out[sel].mean().item()) < 1e-5
    if mode == "none":
        assert torch.equal(out, torch.where(mask, x, 0.0))


def test_mixed_baseline_sums_scores_first():
    batch = random_batch(5)
    mixed = C.mixed_baseline(batch, {"task": 1.0, "style": 0.5})
    task, style = batch.scores["task"], batch.scores["style"]
    assert style.isnan().any()  # a missing style score is skipped in the sum, never read as 0
    scores = dict(batch.scores, manual=torch.where(style.isnan(), task, task + 0.5 * style))
    manual = registry.estimate("grpo", dataclasses.replace(batch, scores=scores), channel="manual")
    assert torch.equal(mixed, manual.advantages)
    with pytest.raises(BatchError, match="safety"):
        C.mixed_baseline(batch, {"safety": 1.0})


def test_dual_ascent_projected_and_lexicographic():
    rates = torch.tensor([[0.3, 0.5], [0.05, 0.5], [0.0, 0.0]])
    tau = torch.tensor([0.1, 0.2])
    beta = C.dual_ascent(rates, tau, 1.0, torch.tensor([0.0, 0.1]))
    expected = torch.tensor([[0.0, 0.1], [0.2, 0.4], [0.15, 0.7], [0.05, 0.5]])
    torch.testing.assert_close(beta, expected)
    lex = C.dual_ascent(rates, tau, 1.0, torch.tensor([0.0, 0.1]), "lexicographic", priority=(0,))
    # step 0: channel 0 violated -> channel 1 held; step 1: channel 0 satisfied -> channel 1 moves
    torch.testing.assert_close(lex, torch.tensor([[0.0, 0.1], [0.2, 0.1], [0.15, 0.4], [0.05, 0.2]]))
    assert (C.dual_ascent(torch.zeros(4, 2), tau, 10.0, torch.ones(2)) >= 0).all()
    with pytest.raises(ValueError, match="priority"):
        C.dual_ascent(rates, tau, 1.0, torch.zeros(2), "lexicographic", priority=(5,))
