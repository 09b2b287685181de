"""Every registered estimator against its plain-loop twin (backend/estimators/twins/, by name)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import torch
from hypothesis import HealthCheck, given, settings

from backend.core.batch import BatchError, RolloutBatch, batch_from_records
from backend.estimators import loop_twins, registry
from backend.estimators.reference import reference_advantages

from .helpers import random_batch
from .strategies import batches

NAMES = registry.names()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed,holes", [(0, False), (1, True), (2, False)])
def test_fast_equals_twin(name, seed, holes):
    batch = random_batch(seed, holes=holes)
    fast = registry.estimate(name, batch).advantages
    slow = reference_advantages(name, batch)
    torch.testing.assert_close(fast, slow, atol=2e-5, rtol=1e-4)
    assert fast[~batch.response_mask].abs().sum().item() == 0.0


VARIANTS = [
    ("as_trained", {"scale": "none", "term": "task", "epsilon": 1e-6}),
    ("as_trained", {"weights": "task:0.5", "term": "task"}),
    ("gigpo", {"mode": "mean_std_norm", "gamma": 0.8, "step_advantage_w": 0.5}),
    ("recency", {"then_gae": True, "value_source": "stored", "gamma": 0.99, "lam": 0.9, "outcome": "rloo"}),
    ("entropy", {"then_gae": True, "value_source": "prefix_tree", "p": 2.0}),
    ("decaying_trace", {"mode": "both", "outcome": "dr_grpo", "trace_lam": 0.8}),
    ("entropy_masked_trace", {"q": 0.5, "mode": "both"}),
    ("entropy_masked_trace", {"q": 0.9, "cap": 1.5, "then_gae": True, "value_source": "zero", "lam": 0.8}),
    ("entropy_mix", {"alpha": 1.0}),
    ("high_entropy_mask", {"q": 0.5, "quantile_over": "response", "outcome": "rloo"}),
    ("high_entropy_mask", {"q": 0.3}),
    ("early_late", {"kappa": 0.5}),
    ("terminal_gae", {"then_gae": True, "value_source": "zero", "gamma": 1.0, "lam": 1.0}),
    ("gae", {"value_source": "stored", "gamma": 0.97, "lam": 0.9}),
    ("gae", {"value_source": "prefix_tree"}),
    ("gae", {"value_source": "zero", "outcome": "rloo"}),
    ("gae", {"value_source": "mc", "lam": 0.5}),
    ("gae", {"value_source": "fitted", "ridge": 0.0, "folds": 2}),
    ("recency", {"then_gae": True, "value_source": "fitted", "folds": 3}),
    ("entropy", {"then_gae": True, "value_source": "mc", "outcome": "rloo"}),
    ("prefix_tree", {"eta": 0.5, "outcome": "dr_grpo"}),
    ("suffix_mc", {"outcome": "rloo"}),
    ("token_rm", {"ridge": 10.0, "then_gae": True, "value_source": "zero", "lam": 0.7}),
    ("token_rm", {"head": "mlp", "hidden": 4, "steps": 6, "ridge": 0.5}),
    (
        "token_rm",
        {"head": "mlp", "hidden": 3, "steps": 4, "folds": 2, "then_gae": True, "value_source": "zero"},
    ),
    ("rudder", {"ridge": 0.1, "folds": 2}),
    ("rudder", {"ridge": 0.0}),
    ("ktae", {"scale": 2.0, "outcome": "dr_grpo"}),
    ("ktae", {"use_tf": False, "alpha": 0.5, "eos_token_id": 3}),
    ("gtpo", {"alpha1": 0.9, "alpha2": 0.5, "correct_above": 0.5}),
    ("entropy_gate", {"base": "recency", "factor": 2.0, "q": 0.5}),
    ("stare", {"base": "entropy", "top_p": 0.5, "weight": 2.0, "target_entropy": 5.0}),
    ("stare", {"top_p": 0.3, "variant": "C2", "target_entropy": 5.0}),
    ("stare", {"target_entropy": 0.1}),
    ("aggregation", {"mode": "token-mean", "base": "entropy_mix"}),
    ("aggregation", {"mode": "seq-mean-token-sum", "normalize": False}),
    ("aggregation", {"mode": "dr-grpo"}),
    ("aggregation", {"mode": "dr-grpo", "l_budget": 64, "normalize": False}),
    ("grpo", {"norm_by_std": False, "channel": "style"}),
    ("maxrl", {"nonpositive_mean": "zero", "channel": "style"}),
    ("maxrl", {"epsilon": 0.0}),
    ("maxrl", {"channel": "style"}),
    ("oar_p", {"threshold": 0.8, "beta": 2.0, "floor": 0.3}),
    ("oar_g", {"threshold": 0.0, "sum_to_length": False, "outcome": "rloo"}),
    ("gcpo", {"top": 0.2, "mass": 0.5, "outcome": "dr_grpo"}),
    ("log_ratio_trace", {"weighting": "both", "trace_lam": 0.8}),
    ("log_ratio_trace", {"clamp_negative": False, "trace_gamma": 0.9, "outcome": "rloo"}),
]


@pytest.mark.parametrize("name,overrides", VARIANTS)
@pytest.mark.parametrize("holes", [False, True])
def test_fast_equals_twin_variants(name, overrides, holes):
    batch = random_batch(7, holes=holes)
    config = registry.make_config(name, **overrides)
    fast = registry.estimate(name, batch, config).advantages
    slow = reference_advantages(name, batch, config)
    torch.testing.assert_close(fast, slow, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("holes", [False, True])
def test_fitted_values_from_hidden_states_match_twin(holes):
    """The fitted probe reads hidden states (extras `hidden` (B, T, H)) and position when a run has them."""
    batch = random_batch(11, holes=holes)
    hidden = torch.randn((*batch.response_mask.shape, 3), generator=torch.Generator().manual_seed(0))
    batch = dataclasses.replace(batch, extras={**batch.extras, "hidden": hidden})
    config = registry.make_config("gae", value_source="fitted", folds=3)
    fast = registry.estimate("gae", batch, config)
    assert fast.diagnostics["value_features"] == ["hidden"]
    slow = reference_advantages("gae", batch, config)
    torch.testing.assert_close(fast.advantages, slow, atol=2e-5, rtol=1e-4)


def test_mc_values_without_resampling_match_twin():
    batch = random_batch(4, extras=False)
    config = registry.make_config("gae", value_source="mc")
    fast = registry.estimate("gae", batch, config)
    assert "no resampling results" in fast.diagnostics["fallback"]
    slow = reference_advantages("gae", batch, config)
    torch.testing.assert_close(fast.advantages, slow, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ["grpo", "recency", "prefix_tree", "ktae", "entropy_mix", "gae", "gtpo"])
def test_single_group_and_length_one(name):
    batch = random_batch(3, n_groups=1, group_size=5, max_len=1, singleton=False, flat_group=False)
    fast = registry.estimate(name, batch).advantages
    torch.testing.assert_close(fast, reference_advantages(name, batch), atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("name", ["ktae", "gtpo", "high_entropy_mask", "entropy_masked_trace", "aggregation"])
def test_empty_responses_match_twin(name):
    """A group whose correct responses are all empty (KTAE's term frequency divides by their token count)."""
    records = []
    for i, (R, ids) in enumerate(
        [(1.0, []), (1.0, []), (0.0, [1, 2, 2]), (0.0, [3]), (1.0, [1, 3, 4]), (0.0, [2, 2])]
    ):
        records.append(
            {
                "token_ids": ids,
                "group_id": i // 3,
                "rollout_id": i,
                "scores": {"task": R},
                "entropies": [0.1 + 0.3 * k for k in range(len(ids))],
                "logprobs": [-0.5 * (k + 1) for k in range(len(ids))],
            }
        )
    batch = batch_from_records(records)
    fast = registry.estimate(name, batch).advantages
    assert torch.isfinite(fast).all()
    torch.testing.assert_close(fast, reference_advantages(name, batch), atol=2e-5, rtol=1e-4)


def test_every_estimator_and_alias_has_a_twin():
    assert loop_twins.missing_twins() == []
    assert set(loop_twins.twin_names()) == set(registry.names())  # no twin of a name that is not registered
    for name in [*registry.names(), *registry.aliases()]:
        assert callable(loop_twins.get_twin(name))


def test_an_estimator_without_a_twin_fails_by_name():
    @dataclass(frozen=True)
    class NoTwinConfig(registry.Config):
        pass

    name = "no_twin_example"

    @registry.register(name, NoTwinConfig, "an estimator registered without a loop twin")
    def no_twin(batch, config):
        return registry.EstimatorResult(torch.zeros(batch.response_mask.shape))

    try:
        assert loop_twins.missing_twins() == [name]
        with pytest.raises(loop_twins.MissingTwin, match=f"no twin for '{name}'"):
            reference_advantages(name, random_batch(0))
    finally:
        del registry._REGISTRY[name]
    assert loop_twins.missing_twins() == []
    with pytest.raises(ValueError, match="already has a twin"):
        loop_twins.twin("grpo")(lambda batch, config: None)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=batches())
def test_fast_equals_twin_on_drawn_batches(batch):
    """Every estimator on batches whose shapes, lengths (0 included), masks with holes, ties and missing
    scores are drawn by hypothesis (one drawn batch serves every estimator: drawing costs more than the
    estimators on these sizes)."""
    for name in NAMES:
        try:
            fast = registry.estimate(name, batch).advantages
        except BatchError:  # e.g. suffix_mc on a batch without a resampled position: nothing to compare
            continue
        torch.testing.assert_close(
            fast,
            reference_advantages(name, batch),
            atol=2e-5,
            rtol=1e-4,
            msg=lambda m, name=name: f"{name}: {m}",
        )


def test_fast_equals_twin_when_every_response_is_empty_but_the_batch_has_width():
    """Hypothesis found it: T = 1 with every mask False and two groups; the fitted models' twins (rudder,
    the gae value probe) had no token to fit and failed instead of giving zeros like the fast path."""
    T = 1
    batch = RolloutBatch(
        response_mask=torch.zeros((3, T), dtype=torch.bool),
        token_ids=torch.ones((3, T), dtype=torch.long),
        group_ids=torch.tensor([1, 8, 8]),
        rollout_ids=torch.tensor([0, 1, 2]),
        steps=torch.zeros(3, dtype=torch.long),
        scores={"task": torch.tensor([0.0, 1.0, 0.0])},
        logprobs=torch.zeros(3, T),
        ref_logprobs=torch.zeros(3, T),
        entropies=torch.zeros(3, T),
        values=torch.zeros(3, T),
    )
    compared = []
    for name in NAMES:
        try:
            fast = registry.estimate(name, batch).advantages
        except BatchError:
            continue
        torch.testing.assert_close(
            fast,
            reference_advantages(name, batch),
            atol=0.0,
            rtol=0.0,
            msg=lambda m, name=name: f"{name}: {m}",
        )
        compared.append(name)
    assert {"rudder", "gae", "token_rm"} <= set(compared)
