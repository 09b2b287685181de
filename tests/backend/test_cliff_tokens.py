"""Cliff tokens (backend/evaluation/cliff_tokens.py) against the official code's outputs and the plain
loop."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from backend.evaluation import cliff_tokens as ct
from backend.evaluation import first_wrong_step as fws
from backend.evaluation import teacher_bench as tb
from backend.store import StoreHandle
from tests.conftest import copy_store, run_cli_here

OFFICIAL = json.loads((Path(__file__).parent / "fixtures" / "official" / "cliff_tokens.json").read_text())


def _pairs_frame(N: int) -> pd.DataFrame:
    """Every (k_prev, k) of one N as a two-position rollout: prefix 1 valued k_prev / N, prefix 2 k / N."""
    k_prev, k = np.meshgrid(np.arange(N + 1), np.arange(N + 1), indexing="ij")
    rid = np.arange((N + 1) ** 2)
    return pd.DataFrame(
        {
            "rollout_id": np.repeat(rid, 2),
            "pos": np.tile([1, 2], len(rid)),
            "value": np.stack([k_prev.ravel(), k.ravel()], 1).ravel() / N,
            "n": N,
        }
    )


@pytest.mark.parametrize("case", range(len(OFFICIAL["matrices"])))
def test_the_test_equals_official_is_cliff_on_every_count(case):
    entry = OFFICIAL["matrices"][case]
    N = entry["N"]
    table = ct.cliff_table(_pairs_frame(N), delta_0=entry["delta_0"], z_alpha=entry["z_alpha"])
    assert len(table) == (N + 1) ** 2
    ours = {
        (int(a), int(b)) for a, b, hit in zip(table["k_prev"], table["k"], table["cliff"], strict=True) if hit
    }
    assert ours == {tuple(p) for p in entry["cliffs"]}
    assert all(ct.is_cliff(a, N, b, N, entry["delta_0"], entry["z_alpha"]) for a, b in entry["cliffs"])
    assert len(ours) > 10  # the table is not trivially empty


def _values_of(detections) -> tuple[pd.DataFrame, dict[int, int]]:
    """The official score arrays as a teacher table: index j values the prefix of j + 1 tokens (pos j + 1)."""
    rows, lengths = [], {}
    for rid, entry in enumerate(detections):
        lengths[rid] = len(entry["scores"]) + 1  # the official arrays stop one token before the end
        rows += [(rid, j + 1, s, 64) for j, s in enumerate(entry["scores"]) if s is not None]
    return pd.DataFrame(rows, columns=["rollout_id", "pos", "value", "n"]), lengths


def test_cliffs_equal_the_official_detectors():
    detections = OFFICIAL["detections"]
    values, lengths = _values_of(detections)
    table = ct.cliff_table(values, lengths)
    firsts = ct.first_cliffs(table)
    for rid, entry in enumerate(detections):
        mine = table[(table["rollout_id"] == rid) & table["cliff"]]
        assert mine["pos"].tolist() == entry["cliff_positions"], rid  # official position = prefix length
        np.testing.assert_allclose(mine["drop"], entry["cliff_drops"], atol=1e-12)
        first = entry["first_position"]
        assert (firsts[rid][1] if rid in firsts else None) == first, rid
    assert sum(len(e["cliff_positions"]) for e in detections) >= 10
    assert any(None in e["scores"] and e["cliff_positions"] for e in detections)  # sparse arrays too


def test_vectorized_equals_the_loop_on_random_tables():
    rng = np.random.default_rng(0)
    rows = []
    for rid in range(60):
        n = int(rng.choice([4, 8, 16]))
        for pos in sorted(rng.choice(30, size=int(rng.integers(1, 12)), replace=False)):
            rows.append((rid, int(pos), rng.integers(0, n + 1) / n, n if rng.random() > 0.1 else 2 * n))
    values = pd.DataFrame(rows, columns=["rollout_id", "pos", "value", "n"]).sample(frac=1, random_state=1)
    lengths = {rid: int(rng.integers(10, 30)) for rid in range(55)}  # some rollouts unknown, some cut
    for lens in (None, lengths):
        fast = ct.cliff_table(values, lens)
        slow = pd.DataFrame(ct.cliff_table_reference(values, lens))
        cols = ["rollout_id", "start", "pos", "token", "cliff", "first"]
        pd.testing.assert_frame_equal(fast[cols].reset_index(drop=True), slow[cols], check_dtype=False)
        assert fast["cliff"].sum() > 5 and fast["first"].sum() < fast["cliff"].sum()


def test_non_binary_values_round_to_counts_as_the_official_score_to_k():
    values = pd.DataFrame({"rollout_id": [0, 0], "pos": [0, 3], "value": [0.9, 0.13], "n": [10, 10]})
    row = ct.cliff_table(values).iloc[0]
    assert (row["k_prev"], row["k"], row["token"], bool(row["cliff"])) == (9, 1, 2, True)


def test_most_negative_token_hits_share_ties():
    cliffs = {0: (2, 4), 1: (0, 1), 2: (5, 6)}
    adv = {
        0: np.array([0.0, 0.1, -0.5, 0.2, 0.3]),  # the minimum inside [2, 4): a hit
        1: np.array([-1.0, -1.0, 0.0, -1.0]),  # three tied minima, one inside
        2: np.array([0.0, -2.0, 0.0, 0.0, 0.0, -1.0]),
    }  # the minimum outside
    hits = ct.most_negative_hits(cliffs, adv, {0: 0, 1: 0, 2: 0})
    assert hits == {0: 1.0, 1: pytest.approx(1 / 3), 2: 0.0}
    # tokens before the first valued position are not judged
    assert ct.most_negative_hits(cliffs, adv, {2: 2})[2] == 1.0
    assert ct.chance_hits(cliffs, {0: 5, 1: 4, 2: 6}, {}) == {0: 0.4, 1: 0.25, 2: pytest.approx(1 / 6)}


# rollout 1: L = 10, success rates 15/16 at 0, 14/16 at 4, 1/16 at 7 -> the first cliff is [4, 7), token 6;
# rollout 2: L = 6, 8/16 at 0, 9/16 at 3 -> no cliff
VALUES = pd.DataFrame(
    {
        "rollout_id": [1, 1, 1, 2, 2],
        "pos": [0, 4, 7, 0, 3],
        "value": [15 / 16, 14 / 16, 1 / 16, 0.5, 9 / 16],
        "stderr": 0.1,
        "n": 16,
    }
)
LENGTHS, OUTCOMES = {1: 10, 2: 6}, {1: 0.0, 2: 1.0}


def test_cliff_hit1_in_a_bench_row_by_hand():
    truth = ct.cliff_truth(VALUES, LENGTHS)
    assert truth.cliffs == {1: (4, 7)} and truth.judged_from == {1: 0, 2: 0}
    seg = tb.teacher_segments(VALUES, LENGTHS, OUTCOMES)
    steps = fws.StepTruth({}, {})
    at_cliff = {1: np.where(np.arange(10) == 6, -1.0, 0.0), 2: np.zeros(6)}
    metrics, per = tb.score_advantages(seg, steps, at_cliff, truth)
    assert metrics["cliff_hit1"] == 1.0 and per["cliff_hit1"].tolist()[0] == 1.0
    assert math.isnan(per["cliff_hit1"].tolist()[1])  # no cliff in rollout 2: not judged
    elsewhere = {1: np.where(np.arange(10) == 8, -1.0, 0.0), 2: np.zeros(6)}
    assert tb.score_advantages(seg, steps, elsewhere, truth)[0]["cliff_hit1"] == 0.0
    flat = tb.score_advantages(seg, steps, {1: np.ones(10), 2: np.ones(6)}, truth)[0]["cliff_hit1"]
    assert flat == pytest.approx(0.3) == tb.chance_row(seg, steps, truth)["cliff_hit1"]  # 3 of 10 tokens


@pytest.fixture(scope="module")
def demo_db(bundled_template, tmp_path_factory) -> Path:
    return copy_store(bundled_template, tmp_path_factory.mktemp("cliff") / "runs.duckdb")


@pytest.mark.slow
def test_cliff_hit1_on_the_shipped_demo_teacher(demo_db):
    result = tb.teacher_bench(StoreHandle(demo_db), "demo", tb.parse_estimator_specs(["grpo", "prefix_tree"]))
    table = result.table.set_index("estimator")
    assert result.n_cliffs == 37 < result.n_rollouts  # 1, 12, 16 and 8 at steps 0-3 of the on-policy teacher
    # flat credit ties every token: it scores exactly the chance value; the group's prefix tree is above it
    assert table.loc["grpo", "cliff_hit1"] == pytest.approx(table.loc["chance", "cliff_hit1"])
    assert table.loc["prefix_tree", "cliff_hit1"] > table.loc["chance", "cliff_hit1"] + 0.1


@pytest.mark.slow
def test_the_command_prints_what_the_function_computes(demo_db):
    table = ct.stored_cliffs(StoreHandle(demo_db), "demo")
    done = run_cli_here("cliff", "--db", str(demo_db), "--run", "demo", "--json")
    assert done.returncode == 0
    printed = json.loads(done.stdout)
    assert printed["pairs"] == len(table) and len(printed["rows"]) == int(table["cliff"].sum()) == 38
    assert table.loc[table["cliff"], "rollout_id"].nunique() == 37  # one rollout has two cliffs
    rid = int(table.loc[table["first"], "rollout_id"].iloc[0])
    done = run_cli_here("cliff", "--db", str(demo_db), "--run", "demo", "--rollout", str(rid), "--json")
    assert done.returncode == 0
    rows = json.loads(done.stdout)["rows"]
    mine = table[(table["rollout_id"] == rid) & table["cliff"]]
    assert [r["token"] for r in rows] == mine["token"].tolist() and rows[0]["first"]
    assert all(isinstance(r["token_text"], str) for r in rows)
    missing = run_cli_here("cliff", "--db", str(demo_db), "--run", "demo", "--rollout", "999999")
    assert missing.returncode == 2 and "usage:" not in missing.stderr  # the command's error, not argparse's
    done = run_cli_here("cliff", "--db", str(demo_db), "--run", "oracle")
    assert done.returncode == 2  # no Monte Carlo values
    assert "creditlens teacher" in done.stderr
