"""Credit-quality metrics against small cases worked out by hand, and the oracle bench's orderings."""

import json
import math

import numpy as np
import pytest
import torch
from scipy import stats

from backend.evaluation import metrics, oracle
from backend.evaluation.metrics import auroc, credit_metrics, spearman, summarize, topk_hits
from tests.conftest import run_cli_here


def _t(rows, dtype=torch.float32):
    return torch.tensor(rows, dtype=dtype)


def test_topk_hits_plain_ranking():
    scores = _t([[3.0, 1.0, 2.0, 0.0]])
    target = _t([[1, 0, 0, 1]], torch.bool)
    mask = torch.ones(1, 4, dtype=torch.bool)
    assert topk_hits(scores, target, mask, torch.tensor([2])).item() == 1.0
    assert topk_hits(scores, target, mask, torch.tensor([4])).item() == 2.0
    assert topk_hits(scores, target, mask, torch.tensor([0])).item() == 0.0


def test_topk_hits_ties_share_the_remaining_slots():
    mask = torch.ones(2, 5, dtype=torch.bool)
    scores = _t([[1, 1, 1, 1, 1], [5, 2, 2, 2, 0]])
    target = _t([[1, 0, 0, 0, 0], [0, 1, 0, 0, 1]], torch.bool)
    hits = topk_hits(scores, target, mask, torch.tensor([2, 2]))
    # row 0: 2 slots over 5 tied tokens, 1 of them a target -> 2/5; row 1: 5 is in, 1 slot over 3 tied -> 1/3
    assert hits.tolist() == pytest.approx([0.4, 1 / 3])


def test_topk_hits_ignores_padding_and_clamps_k():
    scores = _t([[0.5, 1.0, 9.0]])
    target = _t([[1, 0, 1]], torch.bool)  # the padded target must never count
    mask = _t([[1, 1, 0]], torch.bool)
    assert topk_hits(scores, target, mask, torch.tensor([1])).item() == 0.0
    assert topk_hits(scores, target, mask, torch.tensor([5])).item() == 1.0


def test_auroc_hand_cases():
    assert auroc(_t([0.1, 0.4, 0.35, 0.8]), _t([0, 0, 1, 1], torch.bool)) == pytest.approx(0.75)
    assert auroc(_t([1.0, 1.0]), _t([1, 0], torch.bool)) == pytest.approx(0.5)
    assert math.isnan(auroc(_t([1.0, 2.0]), _t([1, 1], torch.bool)))


def test_spearman_matches_scipy_with_ties():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 5, 200).astype(np.float32)
    y = (x + rng.normal(0, 2, 200)).round().astype(np.float32)
    expected = stats.spearmanr(x, y)[0]
    assert spearman(torch.from_numpy(x), torch.from_numpy(y)) == pytest.approx(expected, abs=1e-9)
    assert spearman(_t([1, 2, 3, 4]), _t([40, 30, 20, 10])) == pytest.approx(-1.0)
    assert math.isnan(spearman(_t([1, 1, 1]), _t([1, 2, 3])))


def _hand_case():
    advantages = _t([[2.0, -1.0, 0.5, 0.5], [0.0, 0.0, 0.0, 0.0]])
    keys = _t([[1, 1, 0, 0], [1, 0, 0, 0]])
    credit = _t([[0.3, -0.2, 0.0, 0.0], [0.1, 0.0, 0.0, 0.0]])
    mask = torch.ones(2, 4, dtype=torch.bool)
    return advantages, keys, credit, mask


def test_credit_metrics_hand_case():
    advantages, keys, credit, mask = _hand_case()
    out = credit_metrics(advantages, keys, credit, mask)
    # Row 1 is all zero: left out of the per-response averages, kept in the pooled ones.
    assert out["key_recall"] == pytest.approx(1.0)
    assert out["key_precision"] == pytest.approx(0.5)  # top-4 of 4 tokens hold 2 keys
    assert out["filler_mass"] == pytest.approx(1.0 / 4.0)
    # keys |A| = {2, 1, 0}, others {0.5, 0.5, 0, 0, 0}: 5 + 5 + 3 * 0.5 = 11.5 of 15 pairs
    assert out["auroc"] == pytest.approx(11.5 / 15)
    assert out["sign_accuracy"] == pytest.approx(2 / 3)  # the zero advantage on a key is not a sign match
    expected = stats.spearmanr(advantages.flatten().numpy(), credit.flatten().numpy())[0]
    assert out["spearman"] == pytest.approx(expected)
    assert math.isnan(out["style_recall"])


def test_credit_metrics_broadcast_is_random_guess():
    mask = torch.ones(3, 8, dtype=torch.bool)
    keys = torch.zeros(3, 8)
    keys[:, :2] = 1
    advantages = _t([[1.0] * 8, [-2.0] * 8, [0.5] * 8])
    out = credit_metrics(advantages, keys, keys * 0.1, mask)
    assert out["key_recall"] == pytest.approx(2 / 8)
    assert out["key_precision"] == pytest.approx(2 / 8)
    assert out["auroc"] == pytest.approx(0.5)
    assert out["filler_mass"] == pytest.approx(6 / 8)
    assert out["sign_accuracy"] == pytest.approx(4 / 6)


def test_style_recall_uses_the_counterfactual_delta():
    advantages, keys, credit, mask = _hand_case()
    advantages = advantages + 1.0  # make row 1 live
    style = _t([[0, 0, 1, 1], [0, 1, 1, 1]])
    local = _t([[0.0, 0.0, -1.0, -0.2], [0.0, -0.5, -0.5, -0.5]])
    spread = _t([[-1.0, 0.0, -1.0, 0.0], [-0.4, -0.4, -0.4, -0.4]])
    assert credit_metrics(advantages, keys, credit, mask, style, local)["style_recall"] == pytest.approx(1.0)
    # row 0: top-2 = {0, 2} -> 1/2; row 1: all tied, 3 slots of 4, 3 targets -> 9/4 hits of 3 = 3/4
    assert credit_metrics(advantages, keys, credit, mask, style, spread)["style_recall"] == pytest.approx(
        (0.5 + 0.75) / 2
    )


def test_summarize_mean_and_sample_std():
    rows = [{m: v for m in metrics.METRICS} for v in (1.0, 3.0)]
    rows[1]["style_recall"] = math.nan
    out = summarize(rows)
    assert out["auroc"] == pytest.approx(2.0)
    assert out["auroc_std"] == pytest.approx(math.sqrt(2.0))
    assert out["style_recall"] == pytest.approx(1.0) and out["style_recall_std"] == 0.0


@pytest.fixture(scope="module")
def small_bench():
    """The real registry and channel pipelines on 2 seeds x 60 prompts x 8 responses."""
    rows = oracle.oracle_bench(2, 60, 8, estimators=["grpo", "decaying_trace", "entropy", "token_rm"])
    return {(r["setting"], r["pipeline"], r["estimator"]): r for r in rows}


def test_bench_rows_have_every_metric_and_spread(small_bench):
    assert len(small_bench) == 4 * 3
    for row in small_bench.values():
        assert row["seeds"] == 2
        for m in metrics.METRICS:
            assert f"{m}_std" in row
        assert math.isnan(row["style_recall"]) == (row["setting"] == "task")


def test_bench_reproduces_the_write_up_ordering(small_bench):
    grpo = small_bench[("task", "single", "grpo")]
    entropy = small_bench[("task", "single", "entropy")]
    # broadcast and a terminal trace put most of the credit on filler
    trace = small_bench[("task", "single", "decaying_trace")]
    assert grpo["filler_mass"] > 0.85 and trace["filler_mass"] > 0.85
    # entropy weighting finds the (high-entropy) keys; broadcast is at chance (4 of 48)
    assert entropy["key_recall"] > 0.95 > 0.15 > grpo["key_recall"]
    assert entropy["spearman"] > grpo["spearman"]
    # mixing rewards first hides the style span; the split pipeline recalls it and keeps most key recall
    single = small_bench[("mixed", "single", "entropy")]
    split = small_bench[("mixed", "split", "entropy")]
    assert single["style_recall"] < 0.2 < 0.95 < split["style_recall"]
    assert split["key_recall"] > 0.5
    assert (
        small_bench[("mixed", "split", "grpo")]["style_recall"]
        > small_bench[("mixed", "single", "grpo")]["style_recall"]
    )
    # the learned token RM reads the noisy decision signal: better rank agreement than broadcast
    assert small_bench[("task", "single", "token_rm")]["spearman"] > grpo["spearman"]


def test_oracle_bench_command_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    args = [
        "oracle-bench",
        "--seeds",
        "1",
        "--prompts",
        "12",
        "--group",
        "4",
        "--estimators",
        "grpo,entropy",
        "--workers",
        "1",
        "--quiet",
        "--json",
        str(out),
    ]
    done = run_cli_here(*args)
    assert done.returncode == 0
    table = done.stdout
    assert "entropy" in table and "wall time" in table
    payload = json.loads(out.read_text())
    assert [(r["setting"], r["pipeline"], r["estimator"]) for r in payload["rows"]] == [
        ("task", "single", "grpo"),
        ("mixed", "single", "grpo"),
        ("mixed", "split", "grpo"),
        ("task", "single", "entropy"),
        ("mixed", "single", "entropy"),
        ("mixed", "split", "entropy"),
    ]
    assert payload["rows"][0]["style_recall"] is None
    done = run_cli_here("oracle-bench", "--seeds", "1", "--estimators", "nope")
    assert done.returncode == 2
    assert "nope" in done.stderr and "usage:" not in done.stderr  # the command's error, not argparse's


@pytest.mark.slow
def test_parallel_seeds_match_in_process():
    serial = oracle.oracle_bench(2, 10, 4, estimators=["entropy"], workers=1)
    parallel = oracle.oracle_bench(2, 10, 4, estimators=["entropy"], workers=2)
    strip = [{k: v for k, v in row.items() if k != "seconds"} for row in serial]
    assert strip == [{k: v for k, v in row.items() if k != "seconds"} for row in parallel]


def test_model_bound_estimators_are_named_not_benched():
    bound = set(oracle.model_bound_estimators())
    assert {"oar_p", "oar_g", "gcpo", "suffix_mc"} <= bound and "grpo" not in bound
    assert not bound & set(oracle.bench_estimators())
    said = []
    oracle.oracle_bench(seeds=1, prompts=4, group=2, progress=said.append)
    assert any("not run" in m and "oar_p" in m and "gcpo" in m for m in said), said


def test_oracle_bench_variant_rows_use_the_options(tmp_path):
    """`--variant name:key=value,...` adds rows computed with those options; a bad one is one line, exit 2."""
    out = tmp_path / "bench.json"
    args = [
        "oracle-bench",
        "--seeds",
        "1",
        "--prompts",
        "12",
        "--group",
        "4",
        "--estimators",
        "entropy",
        "--variant",
        "block_mean:base=entropy,k=1",
        "--variant",
        "block_mean:base=entropy,k=48",
        "--workers",
        "1",
        "--quiet",
        "--json",
        str(out),
    ]
    assert run_cli_here(*args).returncode == 0
    rows = {(r["setting"], r["pipeline"], r["estimator"]): r for r in json.loads(out.read_text())["rows"]}
    same = rows[("task", "single", "block_mean:base=entropy,k=1")]  # one token per block: the base itself
    whole = rows[("task", "single", "block_mean:base=entropy,k=48")]  # the whole response: broadcast
    for metric in ("key_recall", "auroc", "spearman"):
        assert same[metric] == rows[("task", "single", "entropy")][metric]
    assert whole["auroc"] == 0.5 and whole["key_recall"] < same["key_recall"]
    done = run_cli_here("oracle-bench", "--seeds", "1", "--variant", "block_mean:k=0")
    assert done.returncode == 2
    err = done.stderr
    assert "block_mean:k=0" in err and len(err.strip().splitlines()) == 1
