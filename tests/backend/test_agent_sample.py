"""The bundled multi-turn agent run (sample_runs/agent_run.jsonl, `python -m backend.demo.agent`): it imports
with its loss mask, turns and turn rewards; every estimator that runs on it gives the calculator's tokens
exactly 0 and keeps them in its rows; the tool answers what the assistant line asked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from backend.demo.agent import calculator
from backend.estimators import registry
from backend.store import Store, StoreHandle
from backend.views import explorer

SAMPLE = Path(__file__).resolve().parents[2] / "sample_runs" / "agent_run.jsonl"


@pytest.fixture(scope="module")
def batch(bundled_template):
    with Store(bundled_template, read_only=True) as store:
        return store.load_batch("agent")


def test_the_sample_is_multi_turn_with_untrained_tool_turns():
    records = [json.loads(line) for line in SAMPLE.open()]
    assert len(records) == 72 and {r["step"] for r in records} == {0, 1, 2}
    multi = [r for r in records if any(t["role"] == "tool" for t in r["turns"])]
    assert len(multi) >= 60
    for r in records:
        for turn in r["turns"]:
            mask = r["loss_mask"][turn["start"] : turn["end"]]
            assert set(mask) == ({1} if turn["role"] == "assistant" else {0})
            if turn["role"] == "tool":
                text = "".join(r["tokens"][turn["start"] : turn["end"]])
                assert text.startswith("calc: ") and text.endswith("\n")
        assert len(r["turn_rewards"]) == sum(t["role"] == "assistant" for t in r["turns"])
        assert r["turn_rewards"][-1] == r["rewards"]["task"]
    solved = {r["group"]: 0 for r in records}
    for r in records:
        solved[r["group"]] += r["rewards"]["task"] > 0
    assert any(0 < n < 6 for n in solved.values()), "no group with a reward to share"


def test_calculator():
    assert calculator("7+5=12 carry 1\n") == "calc: 12\n"
    assert calculator("so so 4+8+1=13\n") == "calc: 13\n"
    assert calculator("let me think\n") == "calc: error\n"


def test_every_estimator_gives_the_tool_tokens_zero_on_the_sample(batch):
    assert batch.loss_mask is not None and batch.turns is not None
    untrained = batch.response_mask & ~batch.loss_mask  # (B, T)
    assert int(untrained.sum()) > 500
    names = registry.supported(batch)
    assert {"progress_advantage", "turn_credit", "grpo", "prefix_tree"} <= set(names)
    assert len(names) >= 25
    for name in names:
        adv = registry.estimate(name, batch).advantages  # (B, T)
        assert torch.equal(adv[untrained], torch.zeros(int(untrained.sum()))), name
    grpo = registry.estimate("grpo", batch).advantages
    assert (grpo[batch.response_mask & batch.loss_mask] != 0).any()


def test_rollouts_table_counts_turns_and_tool_calls(bundled_template):
    """`creditlens rollouts` (the Explorer's table): `turns` and `tool_calls` on a run with turns, as the
    records have them; a run without turns has neither column."""
    handle = StoreHandle(bundled_template)
    rows = explorer.rollout_table(handle, "agent", explorer.ExplorerQuery(limit=None)).rows
    records = [json.loads(line) for line in SAMPLE.open()]
    want = [(len(r["turns"]), sum(t["role"] == "tool" for t in r["turns"])) for r in records]
    assert list(zip(rows["turns"], rows["tool_calls"], strict=True)) == want
    assert explorer.rollout_table(handle, "agent", explorer.ExplorerQuery(sort="tool_calls")).total == 72
    assert "turns" not in explorer.table_columns(handle, "demo", explorer.ExplorerQuery())
