"""MaxRL beyond its fixtures: the twin on drawn batches, missing scores, the contract."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from backend.core.batch import batch_from_records
from backend.estimators import registry
from backend.estimators.reference import reference_advantages
from backend.views import explain

from .strategies import batches


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=batches())
def test_maxrl_equals_twin_on_drawn_batches(batch):
    for overrides in ({}, {"nonpositive_mean": "zero", "epsilon": 0.0}):
        config = registry.make_config("maxrl", **overrides)
        fast = registry.estimate("maxrl", batch, config).advantages
        torch.testing.assert_close(fast, reference_advantages("maxrl", batch, config), atol=2e-5, rtol=1e-4)


def _batch(scores, groups):
    return batch_from_records(
        [
            {"token_ids": [1, 2], "group_id": g, "rollout_id": i, "scores": {"task": r}}
            for i, (r, g) in enumerate(zip(scores, groups, strict=True))
        ]
    )


def test_a_missing_score_is_left_out_of_the_pass_rate():
    res = registry.estimate("maxrl", _batch([1.0, math.nan, 0.0, 0.0], [0, 0, 0, 0]))
    assert res.diagnostics["Z"].tolist() == pytest.approx([2.0, 0.0, -1.0, -1.0], rel=1e-5)  # mean 1/3
    assert math.isnan(res.diagnostics["pass_rate"][1])


def test_flat_groups_give_exactly_zero():
    """Seven 0.7s: their float32 mean is not 0.7, but R - mean must be 0, not a residue."""
    res = registry.estimate("maxrl", _batch([0.7] * 7 + [0.3], [0] * 7 + [1]))
    assert res.diagnostics["Z"].tolist() == [0.0] * 8


def test_division_by_minus_epsilon_is_zero_not_infinite():
    res = registry.estimate("maxrl", _batch([-2e-6, 0.0], [0, 0]), epsilon=1e-6)
    assert torch.isfinite(res.advantages).all() and res.diagnostics["Z"].tolist() == [0.0, 0.0]


def test_the_derivation_divides_by_the_pass_rate():
    batch = _batch([1.0, 0.0, 0.0, 0.0, -1.0, -1.0, 1.0], [0, 0, 0, 0, 1, 1, 1])
    config = registry.make_config("maxrl")
    terms = explain.terms_of(batch, registry.estimate("maxrl", batch, config), 0, "maxrl", config)
    lines = explain.derivation(terms, 1)
    assert lines[0].startswith("Z = (R − mean_G) / (mean_G + ε) = (1 − 0.25) / (0.25 + 1e-06) = 3")
    assert lines[-1] == "A_t = Z = 3 (broadcast to every token)"
    zero = registry.make_config("maxrl", nonpositive_mean="zero")
    terms = explain.terms_of(batch, registry.estimate("maxrl", batch, zero), 6, "maxrl", zero)
    assert explain.derivation(terms, 0)[0].startswith("pass rate mean_G = -0.3333 ≤ 0: no success")
