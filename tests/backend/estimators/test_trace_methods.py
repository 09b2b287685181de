"""log_ratio_trace (after GRPO-λ's ε-trace, arXiv 2510.00194 Eq. 2): its loop twin, the gradient it stands
for, the clamp, the explanation, and what the CLI says about its source.

The central check differentiates the ε-trace surrogate objective itself: per token t the traced ratio
ρ̃_t = exp(Σ_l tr(t, l) (log π − log π_old)(o_{t−l})) enters min(ρ̃_t Z', clip(ρ̃_t) Z'); autograd of that sum
with respect to each token's log π, at log π = log π_old, must equal the estimator's advantages.
"""

from __future__ import annotations

import json

import pytest
import torch

from backend.core.batch import batch_from_records
from backend.estimators import registry
from backend.estimators.reference import reference_advantages
from backend.evaluation.synthetic import oracle_batch
from backend.views import explain
from tests.conftest import run_cli_here

from .helpers import random_batch

VARIANTS = [
    {},
    {"weighting": "both"},
    {"trace_lam": 0.8, "trace_gamma": 0.9, "outcome": "rloo"},
    {"clamp_negative": False, "weighting": "both", "trace_lam": 0.5},
    {"trace_lam": 1.0},
    {"trace_lam": 0.0, "weighting": "both"},
    {"floor": -0.5, "outcome": "dr_grpo"},
]


@pytest.mark.parametrize("overrides", VARIANTS)
@pytest.mark.parametrize("holes", [False, True])
def test_fast_equals_twin(overrides, holes):
    batch = random_batch(3, holes=holes, max_len=14)
    config = registry.make_config("log_ratio_trace", **overrides)
    fast = registry.estimate("log_ratio_trace", batch, config).advantages
    twin = reference_advantages("log_ratio_trace", batch, config)
    torch.testing.assert_close(fast, twin, atol=2e-5, rtol=1e-4)


def _surrogate(
    logp: torch.Tensor, old: torch.Tensor, z: float, d: float, weighting: str, clip: float = 0.2
) -> torch.Tensor:
    """Σ_t min(ρ̃_t z, clip(ρ̃_t) z) for one response: logp, old (L,) float64, tr from Eq. 2 (0-based)."""
    L = logp.shape[0]
    tr = torch.zeros((L, L), dtype=torch.float64)
    for t in range(L):
        for lag in range(t + 1):
            tr[t, t - lag] = d**lag if weighting == "recent" else max(d**lag, d ** (t - lag))
    ratio = torch.exp(tr @ (logp - old))  # (L,) traced ratio of each token's term
    return torch.minimum(ratio * z, ratio.clamp(1 - clip, 1 + clip) * z).sum()


@pytest.mark.parametrize("weighting", ["recent", "both"])
@pytest.mark.parametrize("lam", [0.9, 1.0])
def test_advantages_are_the_gradient_of_the_eps_trace_surrogate_at_pi_old(weighting, lam):
    batch = random_batch(8, max_len=12)
    config = registry.make_config("log_ratio_trace", weighting=weighting, trace_lam=lam, trace_gamma=0.95)
    res = registry.estimate("log_ratio_trace", batch, config)
    d = 0.95 * lam
    for row in range(batch.B):
        cols = batch.response_mask[row].nonzero().flatten()
        old = batch.logprobs[row, cols].to(torch.float64)
        logp = old.clone().requires_grad_(True)
        _surrogate(logp, old, float(res.diagnostics["Z_used"][row]), d, weighting).backward()
        torch.testing.assert_close(
            res.advantages[row, cols], logp.grad.to(torch.float32), atol=1e-5, rtol=1e-5
        )


def test_credit_grows_toward_the_start_and_is_bounded():
    batch = batch_from_records(
        [{"token_ids": [1] * 400, "group_id": 0, "scores": {"task": s}} for s in (1.0, 0.0)]
    )
    res = registry.estimate("log_ratio_trace", batch)  # γλ = 0.99
    W = res.diagnostics["trace_sum"][0]
    assert bool((W[:-1] > W[1:]).all()) and float(W[-1]) == 1.0
    assert float(W[0]) == pytest.approx((1 - 0.99**400) / 0.01, rel=1e-5) and float(W[0]) < 100
    flat = registry.estimate("log_ratio_trace", batch, trace_lam=1.0).diagnostics["trace_sum"][0]
    torch.testing.assert_close(flat, torch.arange(400, 0, -1, dtype=torch.float32))  # λ = 1: L − j + 1
    both = registry.estimate("log_ratio_trace", batch, weighting="both").diagnostics["trace_sum"][0]
    assert bool((both >= W).all()) and float(both[0]) == pytest.approx(400.0)  # tr(t, t) = 1 for j = 1


def test_zero_advantage_rows_get_zero_and_padding_stays_zero():
    batch = random_batch(2, holes=True)
    res = registry.estimate("log_ratio_trace", batch)
    assert bool((res.advantages[~batch.response_mask] == 0).all())
    zero = res.diagnostics["Z_used"] == 0  # the flat group: every score equal
    assert bool(zero.any()) and bool((res.advantages[zero] == 0).all())


def test_config_ranges_are_enforced():
    for key, bad in (("floor", 0.5), ("trace_lam", 1.5), ("weighting", "early")):
        with pytest.raises(ValueError, match=key):
            registry.make_config("log_ratio_trace", **{key: bad})


def test_runs_on_the_oracle_and_cli_names_its_source():
    assert "log_ratio_trace" in registry.supported(oracle_batch(seed=0, prompts=2, group=2))
    done = run_cli_here("estimators", "--json")
    assert done.returncode == 0
    entry = {e["name"]: e for e in json.loads(done.stdout)}["log_ratio_trace"]
    assert "2510.00194" in entry["source"] and "Eq. 2" in entry["source"] and "@4adb0992" in entry["source"]
    assert entry["family"] == "trace" and entry["scope"] == "group" and entry["model_free"]
    assert entry["needs"] == []
    assert {f["name"] for f in entry["fields"]} >= {"weighting", "floor", "trace_lam", "clamp_negative"}
    assert registry.canonical("s_trace") == "entropy_masked_trace"  # S-trace itself is not implemented


@pytest.mark.parametrize("weighting", ["recent", "both"])
def test_explain_terms_and_derivation_carry_the_numbers(weighting):
    batch = random_batch(5)
    config = registry.make_config("log_ratio_trace", weighting=weighting)
    result = registry.estimate("log_ratio_trace", batch, config)
    row = int(((result.diagnostics["Z"] < -0.1) * batch.lengths).argmax())  # a clamped, long response
    terms = explain.terms_of(batch, result, row, "log_ratio_trace", config)
    assert terms["scope"] == "group" and terms["sequence"]["Z_used"] == pytest.approx(-0.1)
    lines = explain.derivation(terms, 0)
    assert any("Z' = max(Z, floor)" in line for line in lines), lines
    assert any(
        f"W_t = Σ_(u ≥ t) tr(u, u − t) = {terms['tokens']['trace_sum'][0]:.4g}" in line for line in lines
    ), lines
    assert lines[-1].endswith(f"{terms['tokens']['advantage'][0]:.4g}")
