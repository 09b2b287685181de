"""Paper-named estimators against their sources' own outputs (equality to 1e-6).

`fixtures/official/<name>.json` holds the outputs of official code, each file written by
`scripts/official_fixtures/<name>.py`, which runs that code from a checkout outside this repository (the
path is its argument) on the inputs written in the script, and records the repository, the commit that ran
and the library versions: KTAE (xiaolizh1/KTAE), STARE (hp-luo/STARE), OAR, GCPO and verl's `agg_loss`.
Nothing of that code is vendored here. TRL is a test dependency: its `get_high_entropy_mask` and its
`dr_grpo` loss (`GRPOTrainer._compute_loss`) are called directly. `fixtures/worked_examples.json` holds what
has no official code, worked by hand: GTPO (the paper's Eq. 3, 5, 6) and GRPO-λ, whose entry is Eq. 2
summed by hand as a public reimplementation quotes it (only page 1 of its paper could be read).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator
from trl.trainer.grpo_trainer import GRPOTrainer  # TRL is a pinned test dependency: compared, never skipped

from backend.core.batch import batch_from_records, model_score_needs
from backend.estimators import registry
from backend.estimators.reference import reference_advantages

from .helpers import random_batch

FIXTURE_DIR = Path(__file__).parent / "fixtures"
OFFICIAL = {
    path.stem: json.loads(path.read_text()) for path in sorted((FIXTURE_DIR / "official").glob("*.json"))
}
FIXTURES = {**json.loads((FIXTURE_DIR / "worked_examples.json").read_text()), **OFFICIAL}


def _padded(values: list[list[float]], batch) -> torch.Tensor:
    """The fixture's right-padded (B, T_official) rows cut or padded to the batch's width."""
    T = batch.response_mask.shape[1]
    out = torch.zeros(batch.response_mask.shape, dtype=torch.float32)
    for i, row in enumerate(values):
        row = row[:T]
        out[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
    return torch.where(batch.response_mask, out, 0.0)


def _batch(records):
    return batch_from_records([dict(r) for r in records])


@pytest.mark.parametrize("case", range(len(FIXTURES["ktae"]["cases"])))
def test_ktae_equals_official(case):
    entry = FIXTURES["ktae"]["cases"][case]
    batch = _batch(entry["records"])
    assert (batch.token_ids == 151643).any()  # the official EOS id occurs and must be scored 0
    res = registry.estimate("ktae", batch)
    torch.testing.assert_close(res.advantages, _padded(entry["advantages"], batch), atol=1e-6, rtol=0)
    assert (res.diagnostics["key_score"][batch.token_ids == 151643] == 0).all()
    torch.testing.assert_close(reference_advantages("ktae", batch), res.advantages, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("case", range(len(FIXTURES["stare"]["cases"])))
def test_stare_equals_official(case):
    entry = FIXTURES["stare"]["cases"][case]
    batch = _batch(entry["records"])
    res = registry.estimate("stare", batch, variant=entry["variant"], top_p=entry["top_p"])
    assert res.diagnostics["gate_on"] == entry["gate_on"]
    assert res.diagnostics["batch_entropy"] == pytest.approx(entry["batch_entropy"], abs=1e-6)
    torch.testing.assert_close(res.diagnostics["omega"], _padded(entry["omega"], batch), atol=1e-6, rtol=0)
    torch.testing.assert_close(res.advantages, _padded(entry["advantages"], batch), atol=1e-6, rtol=0)


def test_stare_fixture_covers_gate_off_and_boosts():
    cases = FIXTURES["stare"]["cases"]
    assert any(not c["gate_on"] for c in cases) and any(c["gate_on"] for c in cases)
    off = next(c for c in cases if not c["gate_on"])
    assert all(w in (0.0, 1.0) for row in off["omega"] for w in row)  # gate off: A unchanged
    on = next(c for c in cases if c["gate_on"] and c["variant"] == "O1")
    assert any(w == pytest.approx(1.1) for row in on["omega"] for w in row)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_aggregation_weights_equal_verl_agg_loss(mode):
    entry = FIXTURES["verl_agg_loss"]
    batch = _batch(entry["records"])
    assert not batch.response_mask[-1].any()  # an empty response, left out of B as verl does
    res = registry.estimate("aggregation", batch, mode=mode, normalize=False, l_budget=entry["l_budget"])
    expected = _padded(entry["c"][mode], batch)
    torch.testing.assert_close(res.diagnostics["weights"], expected, atol=1e-6, rtol=0)


def _trl_dr_grpo_weights(mask: torch.Tensor, max_completion_length: int) -> torch.Tensor:
    """c (B, T) of TRL's own `GRPOTrainer._compute_loss` with loss_type 'dr_grpo', one process, no gradient
    accumulation: minus the gradient of its loss with respect to the per-token log-probabilities at the old
    policy (ratio 1, inside the clip) with every advantage 1. The object it is bound to holds the attributes
    the method reads; the model's forward pass is replaced by those log-probabilities."""
    B, T = mask.shape
    logps = torch.zeros(B, T, requires_grad=True)
    owner = SimpleNamespace(
        accelerator=Accelerator(cpu=True),
        loss_type="dr_grpo",
        max_completion_length=max_completion_length,
        beta=0.0,
        epsilon_low=0.2,
        epsilon_high=0.2,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level="token",
        use_vllm=False,
        aux_loss_enabled=False,
        _entropy_bonus_enabled=False,
        current_gradient_accumulation_steps=1,
        model=SimpleNamespace(training=True),
        args=SimpleNamespace(delta=None),
        _metrics=defaultdict(lambda: defaultdict(list)),
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (logps, torch.zeros(B, T), None),
    )
    inputs = {
        "prompt_ids": torch.zeros(B, 1, dtype=torch.long),
        "prompt_mask": torch.ones(B, 1, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long),
        "completion_mask": mask.long(),
        "advantages": torch.ones(B),
    }
    GRPOTrainer._compute_loss(owner, None, inputs).backward()
    return -logps.grad


def test_dr_grpo_weights_equal_trl():
    """The dr-grpo mode is TRL's dr_grpo: 1/(B L_budget) with B every row, the empty one included."""
    entry = FIXTURES["verl_agg_loss"]
    batch = _batch(entry["records"])
    res = registry.estimate("aggregation", batch, mode="dr-grpo", normalize=False, l_budget=entry["l_budget"])
    trl = _trl_dr_grpo_weights(batch.response_mask, entry["l_budget"])
    torch.testing.assert_close(res.diagnostics["weights"], trl, atol=1e-6, rtol=0)
    # not the batch's longest response: 1 / (B L_budget), B = 7 responses (one empty), L_budget = 16
    assert res.diagnostics["weights"][batch.response_mask].unique().tolist() == pytest.approx([1 / (7 * 16)])
    assert res.diagnostics["fallback"] is None
    unknown = registry.estimate("aggregation", batch, mode="dr-grpo", normalize=False).diagnostics
    assert "without l_budget" in unknown["fallback"] and unknown["l_budget"] == batch.response_mask.shape[1]


def test_verl_seq_mean_token_sum_norm_is_not_dr_grpo():
    """verl's `seq-mean-token-sum-norm` divides the summed token losses by loss_scale_factor alone: c = 1/16
    here, B times Credit Lens's (and TRL's) 1/(B L_budget); its actor then divides by the gradient
    accumulation count, which gives 1/(B L) only for micro-batches of one row (docs/estimators.md)."""
    entry = FIXTURES["verl_agg_loss"]
    batch = _batch(entry["records"])
    verl = _padded(entry["c"]["seq-mean-token-sum-norm"], batch)
    scale = entry["loss_scale_factor"]["seq-mean-token-sum-norm"]
    assert verl[batch.response_mask].unique().tolist() == [1 / scale]
    ours = registry.estimate(
        "aggregation", batch, mode="dr-grpo", normalize=False, l_budget=entry["l_budget"]
    ).diagnostics["weights"]
    torch.testing.assert_close(ours * batch.response_mask.shape[0], verl, atol=1e-7, rtol=0)


def test_gtpo_equals_paper_worked_example():
    entry = FIXTURES["gtpo"]
    batch = _batch(entry["records"])
    res = registry.estimate("gtpo", batch, alpha1=entry["alpha1"], alpha2=entry["alpha2"])
    expected = torch.tensor(entry["advantages"], dtype=torch.float32)
    torch.testing.assert_close(res.advantages, expected, atol=1e-6, rtol=0)
    torch.testing.assert_close(
        res.diagnostics["shaped_reward"], torch.tensor(entry["shaped_reward"]), atol=1e-6, rtol=0
    )
    assert (res.advantages[:2] > 0).all() and (res.advantages[2] < 0).all()  # correct vs incorrect kept


def test_gtpo_reward_conservation_when_alphas_sum_to_one():
    """Proposition of the paper: with a1 + a2 = 1, the shaped rewards of the correct responses alive at t
    sum to d_t (and of the incorrect ones to -h_t)."""
    batch = random_batch(4, holes=True)
    res = registry.estimate("gtpo", batch, alpha1=0.9, alpha2=0.1)
    d = res.diagnostics
    mask = batch.response_mask
    positions = torch.cumsum(mask.long(), 1) - 1  # 0-based among real tokens
    for g in batch.group_ids.unique():
        rows = batch.group_ids == g
        for t in range(int(mask.sum(1).max())):
            at = mask & rows[:, None] & (positions == t)
            for sign, sel in ((1.0, d["correct"]), (-1.0, ~d["correct"])):
                cell = at & sel[:, None]
                if cell.any():
                    total = float(d["shaped_reward"][cell].sum())
                    assert total == pytest.approx(sign * int(cell.sum()), abs=1e-5)


@pytest.mark.parametrize("case", ["recent", "both", "both_unclamped"])
def test_log_ratio_trace_equals_eq2_summed_by_hand(case):
    entry = FIXTURES["log_ratio_trace"]
    batch = _batch(entry["records"])
    weighting = case.split("_")[0]
    res = registry.estimate(
        "log_ratio_trace",
        batch,
        trace_gamma=entry["trace_gamma"],
        trace_lam=entry["trace_lam"],
        weighting=weighting,
        clamp_negative=case != "both_unclamped",
    )
    torch.testing.assert_close(
        res.diagnostics["Z"], torch.tensor(entry["Z"], dtype=torch.float32), atol=1e-6, rtol=0
    )
    torch.testing.assert_close(
        res.diagnostics["trace_sum"], _padded(entry["trace_sum"][weighting], batch), atol=1e-6, rtol=0
    )
    torch.testing.assert_close(res.advantages, _padded(entry["advantages"][case], batch), atol=1e-6, rtol=0)


def _trl_mask(entropies: torch.Tensor, mask: torch.Tensor, threshold: float) -> torch.Tensor:
    """TRL's own method, bound to an object holding a real (single-process CPU) Accelerator, the only
    attribute it reads."""
    owner = SimpleNamespace(accelerator=Accelerator(cpu=True))
    return GRPOTrainer.get_high_entropy_mask(owner, entropies, mask, threshold)


@pytest.mark.parametrize("seed,holes,q", [(0, False, 0.8), (1, True, 0.8), (2, False, 0.5), (5, True, 0.95)])
def test_high_entropy_mask_equals_trl(seed, holes, q):
    batch = random_batch(seed, holes=holes)
    res = registry.estimate("high_entropy_mask", batch, q=q)
    trl = _trl_mask(batch.entropies, batch.response_mask.long(), q)
    assert torch.equal(res.diagnostics["kept"], trl)
    z = res.diagnostics["Z"][:, None].expand_as(res.advantages)
    torch.testing.assert_close(res.advantages, torch.where(trl, z, 0.0), atol=1e-6, rtol=0)  # A unchanged


def test_paper_named_estimators_carry_their_source():
    for name in ("gtpo", "ktae", "high_entropy_mask", "stare", "aggregation", "log_ratio_trace"):
        assert registry.get(name).source, name
    own = ("decaying_trace", "entropy_masked_trace", "entropy_mix", "entropy_gate", "entropy_drop_mask")
    for name in own:
        assert registry.get(name).source == "", name
    assert "ea9fb77f366216d754e2368653911724e73a7376" in registry.get("ktae").source
    assert "bffb9e79c96c318340e35402993d60548d864315" in registry.get("stare").source


def _model_scored_batch(lengths: list[int], scored: list[int], values: list[list[float]], name: str):
    """A batch of one group whose extras hold cached model scores on the first `scored[i]` tokens."""
    scores_name, mask_name = model_score_needs(name)
    records = []
    for i, (L, n, vals) in enumerate(zip(lengths, scored, values, strict=True)):
        records.append(
            {
                "token_ids": list(range(1, L + 1)),
                "group_id": 0,
                "rollout_id": i,
                "scores": {"task": float(i % 2)},
                "extras": {
                    scores_name: list(vals[:n]) + [0.0] * (L - n),
                    mask_name: [1.0] * n + [0.0] * (L - n),
                },
            }
        )
    return _batch(records)


@pytest.mark.parametrize("case", range(len(FIXTURES["oar"]["cases"])))
@pytest.mark.parametrize("name", ["oar_p", "oar_g"])
def test_oar_weights_equal_official(case, name):
    entry = FIXTURES["oar"]["cases"][case]
    R = [len(s) for s in entry["scores"]]
    lengths = [n + 3 for n in R]  # 3 answer tokens after the reasoning: unscored, weight 1 as in the code
    batch = _model_scored_batch(lengths, R, entry["scores"], name)
    res = registry.estimate(
        name, batch, threshold=entry["threshold"], beta=entry["beta"], sum_to_length=entry["sum_to_L"]
    )
    expected = _padded([w + [1.0] * 3 for w in entry["weights"]], batch)
    torch.testing.assert_close(res.diagnostics["weights"], expected, atol=1e-6, rtol=0)
    z = res.diagnostics["Z"][:, None]
    torch.testing.assert_close(
        res.advantages, torch.where(batch.response_mask, z * expected, 0.0), atol=1e-6, rtol=0
    )


@pytest.mark.parametrize("case", range(len(FIXTURES["gcpo"]["cases"])))
def test_gcpo_weights_equal_official(case):
    entry = FIXTURES["gcpo"]["cases"][case]
    delta = (torch.tensor(entry["logp_neg"]) - torch.tensor(entry["logp_pos"])).tolist()
    batch = _model_scored_batch(entry["lengths"], entry["lengths"], delta, "gcpo")
    res = registry.estimate("gcpo", batch)
    expected = _padded(entry["weights"], batch)
    torch.testing.assert_close(res.diagnostics["weights"], expected, atol=1e-6, rtol=0)


def test_model_based_estimators_carry_their_source():
    assert "8dbc47862b5c3636b6070be16c9a181b17ca6346" in registry.get("oar_p").source
    assert registry.get("oar_g").source == registry.get("oar_p").source
    assert "e0f183de1ddad5714587be3eaed5b01be44724ee" in registry.get("gcpo").source


def test_official_fixtures_name_their_script_commit_and_libraries():
    root = Path(__file__).resolve().parents[3]
    for name, entry in OFFICIAL.items():
        assert entry["made_by"] == f"scripts/official_fixtures/{name}.py", name
        assert (root / entry["made_by"]).is_file(), name
        assert len(entry["commit"]) == 40 and entry["commit"] == entry["cited_commit"], name
        assert entry["repository"] and entry["python"] and entry["libraries"]["torch"], name
    cited = {"ktae": "ktae", "stare": "stare", "oar_p": "oar", "gcpo": "gcpo", "aggregation": "verl_agg_loss"}
    for estimator, name in cited.items():
        assert OFFICIAL[name]["commit"] in registry.get(estimator).source, estimator


def test_ktae_fixture_decides_fisher_p_one_exactly():
    """The official code's `p != 1.0` depends on the CPU's rounding, so the KTAE fixture's
    advantages take each Fisher p = 1 exactly (F = 0); the fixture also keeps the tables whose float32 p fell
    under 1 on the machine that made it, and that machine's unchanged official output, which differs."""
    cases = FIXTURES["ktae"]["cases"]
    tables = [t for case in cases for t in case["fisher_tables"]]
    assert any(t["p_exact"] == "1/1" and t["p_official"] < 1.0 and t["replaced"] for t in tables)
    assert any(t["p_exact"] == "1/3" for t in tables)  # a tie between equal probabilities, both counted
    assert any(case["advantages"] != case["advantages_as_run"] for case in cases)


def _group_batch(group_ids: list, scores: list[float], lengths: list[int]):
    return _batch(
        [
            {"token_ids": list(range(1, n + 1)), "group_id": g, "rollout_id": i, "scores": {"task": r}}
            for i, (g, r, n) in enumerate(zip(group_ids, scores, lengths, strict=True))
        ]
    )


@pytest.mark.parametrize("case", range(len(FIXTURES["maxrl"]["cases"])))
def test_maxrl_equals_official(case):
    """The official patch of verl's GRPO advantage (Zanette-Labs/MaxRL), run from its project page."""
    entry = FIXTURES["maxrl"]["cases"][case]
    batch = _group_batch(entry["group_ids"], entry["scores"], entry["lengths"])
    res = registry.estimate("maxrl", batch, epsilon=entry["epsilon"])
    torch.testing.assert_close(res.advantages, _padded(entry["advantages"], batch), atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(reference_advantages("maxrl", batch), res.advantages, atol=1e-6, rtol=1e-6)


def test_maxrl_fixture_covers_singletons_no_success_and_a_zero_mean():
    cases = FIXTURES["maxrl"]["cases"]
    first = cases[0]
    assert first["advantages"][0][0] == pytest.approx(3.0, rel=1e-5)  # pass rate 1/4: (1 - 1/4) / (1/4)
    assert first["advantages"][-1] == [0.0, 0.0]  # a group of one: (R - R) / (R + eps)
    # rewards -1 and 1: mean 0, so the official code divides by eps alone
    assert max(abs(a) for row in cases[2]["advantages"] for a in row) == pytest.approx(1e6, rel=1e-5)


@pytest.mark.parametrize("case", range(len(FIXTURES["maxrl_prime_rl"]["cases"])))
def test_maxrl_zero_mode_equals_prime_rl(case):
    """prime-rl's max_rl: no epsilon, and a group with mean <= 0 gets 0 (the paper's Algorithm 1 too)."""
    entry = FIXTURES["maxrl_prime_rl"]["cases"][case]
    n = len(entry["rewards"])
    batch = _group_batch([0] * n, entry["rewards"], [2] * n)
    res = registry.estimate("maxrl", batch, epsilon=0.0, nonpositive_mean="zero")
    torch.testing.assert_close(res.diagnostics["Z"], torch.tensor(entry["advantages"]), atol=1e-6, rtol=1e-6)


def test_maxrl_modes_differ_where_the_sources_do():
    """Negative rewards: the official patch divides by a negative mean, prime-rl and the paper give 0."""
    entry = next(c for c in FIXTURES["maxrl_prime_rl"]["cases"] if c["rewards"] == [-1.0, 0.0, -0.5])
    batch = _group_batch([0, 0, 0], entry["rewards"], [2, 2, 2])
    divide = registry.estimate("maxrl", batch).diagnostics["Z"]
    assert divide.tolist() == pytest.approx([1.0, -1.0, 0.0], rel=1e-5)  # (R + 0.5) / (-0.5 + 1e-6)
    assert registry.estimate("maxrl", batch, nonpositive_mean="zero").diagnostics["Z"].tolist() == [0.0] * 3
    assert "8bafaa9cf04c9d68511afd4c2cff75afbc8dc3a2" in registry.get("maxrl").source
    assert FIXTURES["maxrl_prime_rl"]["commit"] in registry.get("maxrl").source
