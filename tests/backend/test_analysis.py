"""The views' numbers: token classes (token_classes), credit mass, shares and rank agreement (credit_shares),
the display prefix tree (display_tree), split-channel credit and its replay (channel_credit), the
oracle (oracle)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from backend.core.batch import batch_from_records
from backend.credit import channel_credit, credit_shares, token_classes
from backend.evaluation import oracle
from backend.evaluation.synthetic import oracle_batch
from backend.views import display_tree


def small_batch():
    records = [
        {
            "token_ids": [1, 2, 3, 4],
            "group_id": 0,
            "tokens": ["Hi", ",", "12", "\n"],
            "scores": {"task": 1.0},
            "token_rewards": {"style": [0.0, -1.0, 0.0, 0.0]},
        },
        {
            "token_ids": [1, 2, 5],
            "group_id": 0,
            "tokens": ["Hi", ",", "x"],
            "scores": {"task": 0.0},
            "token_rewards": {"style": [0.0, 0.0, 0.0]},
        },
    ]
    return batch_from_records(records)


def test_token_classes_priority_and_padding():
    batch = small_batch()
    classes = token_classes.class_ids(batch)
    assert token_classes.labels(batch, 0) == ["other", "style span", "digits", "step end"]
    assert token_classes.labels(batch, 1) == ["other", "punctuation", "other"]
    assert classes[1, 3] == -1


def test_key_tokens_from_the_oracle_win():
    batch = oracle_batch(0, prompts=2, group=4)
    classes = token_classes.class_ids(batch)
    keys = batch.extras["key_mask"].numpy() > 0
    assert (classes[keys] == credit_shares.CREDIT_CLASSES.index("key")).all()


def test_credit_mass_sums_to_one_and_broadcast_matches_token_share():
    batch = small_batch()
    flat = torch.where(batch.response_mask, 1.0, 0.0)
    peaked = torch.zeros_like(flat)
    peaked[0, 2] = 5.0
    frame = credit_shares.credit_mass_by_class(
        {"flat": flat, "peaked": peaked}, token_classes.class_ids(batch), batch.response_mask
    )
    for _, part in frame.groupby("estimator"):
        assert math.isclose(part["credit_share"].sum(), 1.0)
    flat_rows = frame[frame.estimator == "flat"]
    assert np.allclose(flat_rows["credit_share"], flat_rows["token_share"])
    assert frame.set_index(["estimator", "token_class"]).loc[("peaked", "digits"), "credit_share"] == 1.0


def test_rank_agreement_is_symmetric_with_unit_diagonal():
    mask = torch.ones(3, 5, dtype=torch.bool)
    a = torch.arange(15.0).reshape(3, 5)
    out = credit_shares.rank_agreement(
        {"a": a, "same": 2 * a + 1, "reverse": -a, "flat": torch.zeros(3, 5)}, mask
    )
    assert out.loc["a", "same"] == pytest.approx(1.0)
    assert out.loc["a", "reverse"] == pytest.approx(-1.0)
    assert out.loc["reverse", "a"] == out.loc["a", "reverse"]
    assert math.isnan(out.loc["a", "flat"]) and math.isnan(out.loc["flat", "flat"])


def test_shares():
    shares = credit_shares.abs_shares({"task": np.array([1.0, -1.0]), "style": np.array([0.0, -2.0])})
    assert shares == {"task": 0.5, "style": 0.5}
    per_token = credit_shares.token_shares({"task": np.array([1.0, 0.0]), "style": np.array([-3.0, 0.0])})
    assert per_token["style"][0] == 0.75 and per_token["task"][1] == 0.0


def test_prefix_tree_nodes_values_and_td():
    tree = display_tree.prefix_tree(
        [[1, 2, 3], [1, 2, 4, 5], [1, 2, 4], [9]], np.array([1.0, -1.0, 0.0, 2.0])
    )
    frame = tree.frame([["a", "b", "c"], ["a", "b", "d", "e"], ["a", "b", "d"], ["z"]])
    root = frame.iloc[0]
    assert root["label"] == "prompt" and root["count"] == 4 and root["value"] == pytest.approx(0.5)
    shared = frame[frame.label == "ab"].iloc[0]
    assert (shared.start, shared.end, shared["count"]) == (0, 2, 3) and shared.branches
    assert shared.value == pytest.approx(0.0) and shared.td == pytest.approx(-0.5)
    child = frame[frame.label == "d"].iloc[0]
    assert child.value == pytest.approx(-0.5) and child.td == pytest.approx(-0.5)
    node = tree.node_at(1, 3)
    assert node.start == 3 and node.members == [1]
    assert tree.node_at(0, 1).end == 2


def test_channel_credit_contributions_sum_to_final():
    batch = oracle_batch(0, prompts=2, group=4)
    credit = channel_credit.channel_credit(batch, "entropy", (("p", 2.0),), {"style": 0.5})
    assert credit.betas["style"] == 0.5
    total = sum(credit.contributions.values())
    assert np.allclose(total, credit.final, atol=1e-6)
    default = channel_credit.channel_credit(batch)
    assert not np.allclose(default.final, credit.final)


def test_dual_ascent_replay_follows_the_update_rule():
    means = pd.DataFrame(
        {
            "step": [0, 0, 1, 1],
            "channel": ["style", "task", "style", "task"],
            "violation_rate": [0.5, 0.0, 0.2, 0.0],
        }
    )
    out = channel_credit.dual_ascent_replay(means, {"style": 0.1}, 2.0, {"style": 1.0})
    betas = out["beta"].tolist()
    assert betas == pytest.approx([1.0, 1.0 + 2 * 0.4, 1.8 + 2 * 0.1])
    assert out["step"].tolist() == [-1, 0, 1]
    assert channel_credit.dual_ascent_replay(means, {"nothing": 0.1}, 1.0, {}).empty


def test_teacher_agreement_against_segment_values():
    batch = batch_from_records([{"token_ids": [1, 2, 3, 4], "group_id": 0, "scores": {"task": 1.0}}])
    values = pd.DataFrame(
        {"rollout_id": [0, 0], "pos": [0, 2], "value": [0.2, 0.9]}
    )  # teacher 0.7, 0.7, 0.1, 0.1
    teacher_like = torch.tensor([[0.4, 0.4, 0.4, 0.4]])
    shaped = torch.tensor([[0.5, 0.5, 0.1, 0.1]])
    out = oracle.teacher_agreement(batch, {"flat": teacher_like, "shaped": shaped}, values).set_index(
        "estimator"
    )
    assert out.loc["flat", "sign_accuracy"] == 1.0 and out.loc["flat", "tokens"] == 4
    assert math.isnan(out.loc["flat", "spearman"])  # a constant estimator has no ranking
    assert out.loc["shaped", "spearman"] == pytest.approx(1.0)


def test_oracle_table_orders_entropy_above_broadcast():
    batch = oracle_batch(0, prompts=20, group=8)
    table, errors = oracle.oracle_table(batch, ["grpo", "entropy", "no_such_estimator"])
    assert len(errors) == 1 and "no_such_estimator" in errors[0]
    split = table[table.pipeline == "split"].set_index("estimator")
    single = table[table.pipeline == "single"].set_index("estimator")
    assert split.loc["entropy", "key_recall"] > split.loc["grpo", "key_recall"]
    assert split.loc["grpo", "style_recall"] > single.loc["grpo", "style_recall"]


def test_credit_difference():
    assert credit_shares.credit_difference(np.array([1.0, 2.0]), np.array([0.5, 3.0])).tolist() == [-0.5, 1.0]
