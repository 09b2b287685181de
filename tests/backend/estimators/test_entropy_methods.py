"""pivot_buckets, divergence_progress and asymmetric_confidence (after the ERPO, EP-GRPO and ACPO abstracts).

No official code exists for any of the three (EP-GRPO: "the code will be available"; none found for ERPO or
ACPO), so there is no fixture of official outputs: the worked examples below are computed by hand from the
formulas in the registry descriptions, and the loop twins are checked on random batches.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from backend.core.batch import batch_from_records
from backend.estimators import registry
from backend.estimators.reference import reference_advantages
from backend.evaluation.synthetic import oracle_batch
from backend.views import explain
from tests.conftest import run_cli_here

from .helpers import random_batch

NAMES = ("pivot_buckets", "divergence_progress", "asymmetric_confidence")

VARIANTS = [
    ("pivot_buckets", {"q": 0.5, "alpha": 2.0, "windows": 3, "anchor": 1.0}),
    ("pivot_buckets", {"windows": 1, "outcome": "rloo", "anchor": 0.2}),
    ("pivot_buckets", {"q": 0.0, "windows": 64, "outcome": "dr_grpo"}),
    ("divergence_progress", {"lam": 2.0, "windows": 2, "q": 0.5}),
    ("divergence_progress", {"lam": 0.0, "alpha": 0.0, "outcome": "rloo"}),
    ("divergence_progress", {"windows": 1, "signal_epsilon": 0.0, "channel": "style"}),
    ("divergence_progress", {"signal_clip": 0.5, "lam": 3.0}),
    ("asymmetric_confidence", {"alpha": 3.0, "outcome": "dr_grpo"}),
    ("asymmetric_confidence", {"keep_total": False, "channel": "style"}),
]


@pytest.mark.parametrize("name,overrides", VARIANTS)
@pytest.mark.parametrize("seed,holes", [(7, False), (8, True), (9, True)])
def test_fast_equals_twin_variants(name, overrides, seed, holes):
    batch = random_batch(seed, holes=holes)
    config = registry.make_config(name, **overrides)
    fast = registry.estimate(name, batch, config).advantages
    torch.testing.assert_close(fast, reference_advantages(name, batch, config), atol=2e-5, rtol=1e-4)
    assert fast[~batch.response_mask].abs().sum().item() == 0.0


@pytest.mark.parametrize("name", NAMES)
def test_single_group_length_one_and_empty_responses_match_twin(name):
    batch = random_batch(3, n_groups=1, group_size=5, max_len=1, singleton=False, flat_group=False)
    torch.testing.assert_close(
        registry.estimate(name, batch).advantages, reference_advantages(name, batch), atol=2e-5, rtol=1e-4
    )
    records = [
        {
            "token_ids": ids,
            "group_id": i // 3,
            "rollout_id": i,
            "scores": {"task": R},
            "entropies": [0.1 + 0.3 * k for k in range(len(ids))],
            "logprobs": [-0.5 * (k + 1) for k in range(len(ids))],
            "ref_logprobs": [-0.4 * (k + 1) for k in range(len(ids))],
        }
        for i, (R, ids) in enumerate([(1.0, []), (0.0, [1, 2, 2]), (1.0, [3]), (0.0, [1]), (1.0, [])])
    ]
    batch = batch_from_records(records)
    fast = registry.estimate(name, batch).advantages
    assert torch.isfinite(fast).all()
    torch.testing.assert_close(fast, reference_advantages(name, batch), atol=2e-5, rtol=1e-4)


def _pair(entropies, scores, logprobs=None, ref_logprobs=None):
    records = []
    for i, (H, R) in enumerate(zip(entropies, scores, strict=True)):
        rec = {
            "token_ids": [1] * len(H),
            "group_id": 0,
            "rollout_id": i,
            "scores": {"task": R},
            "entropies": H,
        }
        if logprobs is not None:
            rec["logprobs"] = logprobs[i]
        if ref_logprobs is not None:
            rec["ref_logprobs"] = ref_logprobs[i]
        records.append(rec)
    return batch_from_records(records)


def test_pivot_buckets_worked_example():
    # r0: H = [.1 .9 .2 .8], its 0.5-quantile is 0.5 -> pivots at .9 and .8: g = [1 2 1 2], windows 0 0 1 1.
    # r1: H = [.5 .1], quantile 0.3 -> pivot at .5: g = [2 1], windows 0 1.
    # Window means over the group: window 0 (1 2 2) = 5/3, window 1 (1 2 1) = 4/3.
    batch = _pair([[0.1, 0.9, 0.2, 0.8], [0.5, 0.1]], [1.0, 0.0])
    Z = 0.5 / (math.sqrt(0.5) + 1e-6)
    res = registry.estimate("pivot_buckets", batch, q=0.5, alpha=1.0, windows=2, anchor=1.0)
    expected = torch.tensor([[0.6, 1.2, 0.75, 1.5], [-1.2, -0.75, 0.0, 0.0]]) * Z
    torch.testing.assert_close(res.advantages, expected, atol=1e-6, rtol=0)
    half = registry.estimate("pivot_buckets", batch, q=0.5, alpha=1.0, windows=2, anchor=0.5).advantages
    torch.testing.assert_close(
        half, 0.5 * (expected + torch.tensor([[Z] * 4, [-Z, -Z, 0, 0]])), atol=1e-6, rtol=0
    )
    assert res.diagnostics["window"][0].tolist() == [0, 0, 1, 1]


def test_pivot_buckets_keeps_the_outcome_sign_and_anchor_zero_is_grpo():
    batch = random_batch(11, holes=True)
    res = registry.estimate("pivot_buckets", batch)
    z = res.diagnostics["Z"]
    mask = batch.response_mask
    assert (torch.sign(res.advantages[mask]) == torch.sign(z[:, None].expand_as(mask)[mask])).all()
    torch.testing.assert_close(
        registry.estimate("pivot_buckets", batch, anchor=0.0).advantages,
        registry.estimate("grpo", batch).advantages,
        atol=1e-6,
        rtol=0,
    )


def test_divergence_progress_keeps_signal_when_the_rewards_are_all_equal():
    # Equal rewards: Z = 0 (GRPO gives nothing). Cumulative-entropy progress, K = 2:
    # r0: H = [1 1 2] -> spent before t / total = 0, .25, .5 -> windows 0 0 1; r1: H = [0 3] -> 0, 0 -> 0 0.
    # d = logprob - ref: window 0 holds [.2 -.2 .1 .3] (mean .1, std sqrt(.14/3)), window 1 holds [.5] alone.
    batch = _pair(
        [[1.0, 1.0, 2.0], [0.0, 3.0]],
        [1.0, 1.0],
        logprobs=[[-0.3, -0.7, -0.5], [-0.9, -0.2]],
        ref_logprobs=[[-0.5, -0.5, -1.0], [-1.0, -0.5]],
    )
    assert registry.estimate("grpo", batch).advantages.abs().sum() == 0
    res = registry.estimate(
        "divergence_progress", batch, q=0.9, alpha=1.0, windows=2, lam=1.0, signal_epsilon=0.0
    )
    std = math.sqrt(0.14 / 3)
    s = torch.tensor([[0.1 / std, -0.3 / std, 0.0], [0.0, 0.2 / std, 0.0]])
    gate = torch.tensor([[1.0, 1.0, 2.0], [1.0, 2.0, 0.0]])  # the 0.9-quantile pivots: H = 2 and H = 3
    torch.testing.assert_close(res.diagnostics["gate"], gate)
    torch.testing.assert_close(res.advantages, gate * s, atol=1e-5, rtol=0)
    assert res.advantages.abs().sum() > 0
    clipped = registry.estimate("divergence_progress", batch, q=0.9, windows=2, lam=1.0, signal_clip=0.5)
    torch.testing.assert_close(clipped.diagnostics["signal"], s.clamp(-0.5, 0.5), atol=1e-5, rtol=0)


def test_divergence_progress_without_divergence_is_the_gated_outcome_and_unscored_rows_get_zero():
    batch = random_batch(4, holes=True)  # 5 responses without a style score
    same = batch_from_records(
        [
            {
                "token_ids": [1, 2, 3],
                "group_id": 0,
                "scores": {"task": R},
                "entropies": [0.5, 1.5, 0.2],
                "logprobs": [-0.1, -1.0, -0.3],
                "ref_logprobs": [-0.1, -1.0, -0.3],
            }
            for R in (1.0, 0.0, 0.5)
        ]
    )
    res = registry.estimate("divergence_progress", same)
    gated = res.diagnostics["gate"] * res.diagnostics["Z"][:, None]
    torch.testing.assert_close(res.advantages, gated, atol=1e-6, rtol=0)
    style = registry.estimate("divergence_progress", batch, channel="style").advantages
    unscored = torch.isnan(batch.scores["style"])
    assert unscored.any() and style[unscored].abs().sum() == 0


def test_asymmetric_confidence_worked_example():
    # p = .5 (u = 1 bit, c = 0), p = 1 (u = 0, c = 1), p = .1 (u = H(.1), c = 0: not the mode).
    lp = [math.log(0.5), 0.0, math.log(0.1)]
    batch = _pair([[1.0] * 3, [1.0] * 3], [1.0, 0.0], logprobs=[lp, lp])
    res = registry.estimate("asymmetric_confidence", batch, alpha=1.0)
    u01 = -(0.1 * math.log2(0.1) + 0.9 * math.log2(0.9))
    torch.testing.assert_close(res.diagnostics["surrogate_entropy"][0], torch.tensor([1.0, 0.0, u01]))
    torch.testing.assert_close(res.diagnostics["confidence"][1], torch.tensor([0.0, 1.0, 0.0]))
    Z = 0.5 / (math.sqrt(0.5) + 1e-6)
    success = torch.tensor([2.0, 1.0, 1.0 + u01])
    failure = torch.tensor([1.0, 2.0, 1.0])
    torch.testing.assert_close(res.advantages[0], Z * success / success.mean(), atol=1e-6, rtol=0)
    torch.testing.assert_close(res.advantages[1], -Z * failure / failure.mean(), atol=1e-6, rtol=0)
    # the uncertain token leads in the success, the overconfident one in the failure
    assert res.advantages[0].argmax() == 0 and res.advantages[1].argmin() == 1
    raw = registry.estimate("asymmetric_confidence", batch, keep_total=False).advantages
    torch.testing.assert_close(raw[0], Z * success, atol=1e-6, rtol=0)
    torch.testing.assert_close(
        registry.estimate("asymmetric_confidence", batch, alpha=0.0).advantages,
        registry.estimate("grpo", batch).advantages,
        atol=1e-6,
        rtol=0,
    )


def test_oracle_run_lacks_ref_logprobs_so_divergence_progress_is_unavailable_there():
    probe = oracle_batch(seed=0, prompts=2, group=2)
    missing = registry.unavailable(probe)
    assert "ref_logprobs" in missing["divergence_progress"]
    assert "pivot_buckets" not in missing and "asymmetric_confidence" not in missing
    records = [
        {
            "token_ids": [1, 2],
            "group_id": 0,
            "scores": {"task": float(i)},
            "entropies": [0.3, 0.9],
            "logprobs": [-0.2, -1.1],
            "ref_logprobs": [-0.3, -1.0],
        }
        for i in range(2)
    ]
    assert set(NAMES) <= set(registry.supported(batch_from_records(records)))


def test_cli_lists_them_with_honest_names_sources_and_scope():
    done = run_cli_here("estimators", "--json")
    assert done.returncode == 0
    listed = {e["name"]: e for e in json.loads(done.stdout)}
    for name, paper in zip(NAMES, ("ERPO", "EP-GRPO", "ACPO"), strict=True):
        entry = listed[name]
        assert f"not {paper}" in entry["description"] and "abstract only" in entry["source"]
        assert entry["scope"] == "group" and entry["model_free"]
        assert {f["name"] for f in entry["fields"]} >= {"channel", "outcome", "alpha"}
    assert listed["divergence_progress"]["needs"] == ["entropies", "logprobs", "ref_logprobs"]


@pytest.mark.parametrize(
    "name,formula",
    [
        ("pivot_buckets", "w_t = (1 − β) + β ĝ_t"),
        ("divergence_progress", "A_t = g_t (Z + λ s_t)"),
        ("asymmetric_confidence", "u_t = "),
    ],
)
def test_explain_terms_and_derivation_carry_the_numbers(name, formula):
    batch = random_batch(5)
    config = registry.make_config(name)
    result = registry.estimate(name, batch, config)
    row = int(batch.lengths.argmax())
    terms = explain.terms_of(batch, result, row, name, config)
    assert terms["scope"] == "group" and "Z" in terms["sequence"]
    t = int(batch.lengths[row]) - 1
    lines = explain.derivation(terms, t)
    assert any(formula in line for line in lines), lines
    assert lines[-1].endswith(f"{terms['tokens']['advantage'][t]:.4g}")


def test_position_windows_are_exact_at_window_edges():
    # float32 (8 - 1) / 10 * 10 = 6.99999988: a float window would put the 8th of 10 tokens in window 6.
    records = [
        {
            "token_ids": [1] * 10,
            "group_id": 0,
            "scores": {"task": float(i % 2)},
            "entropies": [0.0] * 10,
            "logprobs": [-0.1 * k for k in range(10)],
            "ref_logprobs": [-0.2] * 10,
        }
        for i in range(4)
    ]
    batch = batch_from_records(records)
    for name in ("pivot_buckets", "divergence_progress"):  # zero entropy: divergence_progress uses positions
        config = registry.make_config(name, windows=10)
        res = registry.estimate(name, batch, config)
        assert res.diagnostics["window"][0].tolist() == list(range(10)), name
        twin = reference_advantages(name, batch, config)
        torch.testing.assert_close(res.advantages, twin, atol=2e-5, rtol=1e-4)
