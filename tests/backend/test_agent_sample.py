"""The bundled multi-turn agent run (sample_runs/agent_run.jsonl, `python -m backend.demo.agent`): it imports
with its loss mask, turns and turn rewards; every estimator that runs on it gives the calculator's tokens
exactly 0 and keeps them in its rows; the tool answers what the assistant line asked."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from backend.demo import agent
from backend.demo.agent import calculator
from backend.estimators import registry
from backend.store import Store, StoreHandle, turn_sql
from backend.views import explorer, turns

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


def _turn_shares_by_hand(advantages, lengths, turns) -> tuple[float, float, float] | None:
    """The first and the last assistant turn's share of Σ|A| over the response, and that of the assistant
    turns a tool or environment turn follows, from per-token advantages and the record's turns."""
    magnitude = np.abs(np.asarray(advantages, dtype=np.float64)[:lengths])
    total = magnitude.sum()
    if total == 0:
        return None
    mass = [magnitude[t["start"] : t["end"]].sum() for t in turns]
    assistant = [k for k, t in enumerate(turns) if t["role"] == "assistant"]
    calls = [k for k in assistant if k + 1 < len(turns) and turns[k + 1]["role"] in ("tool", "environment")]
    return mass[assistant[0]] / total, mass[assistant[-1]] / total, sum(mass[k] for k in calls) / total


def test_rollouts_table_splits_the_credit_by_turn_as_the_tokens_do(bundled_db):
    """`creditlens rollouts` (the Explorer's table) on the agent run: assistant_turns, and turn_share_first /
    _last / _calls equal the shares computed here from the records' turns and turn_credit's per-token
    advantages (--credit channel), and from grpo's per-token A_final in `creditlens turns --group` (the
    default --credit final)."""
    handle = StoreHandle(bundled_db)
    records = {i: r for i, r in enumerate(json.loads(line) for line in SAMPLE.open())}
    query = explorer.ExplorerQuery(estimator="turn_credit", credit="channel", limit=None)
    rows = explorer.rollout_table(handle, "agent", query).rows.set_index("rollout_id")
    assert {"assistant_turns", *turn_sql.SHARE_COLUMNS} <= set(rows.columns)
    with handle.read() as store:
        batch = store.load_batch("agent")
    advantages = registry.estimate("turn_credit", batch).advantages.numpy()  # (B, T), every group at once
    shares = ["turn_share_first", "turn_share_last", "turn_share_calls"]
    compared = 0
    for i, rid in enumerate(batch.rollout_ids.tolist()):
        record = records[rid]
        assert rows.loc[rid, "assistant_turns"] == sum(t["role"] == "assistant" for t in record["turns"])
        want = _turn_shares_by_hand(advantages[i], int(batch.lengths[i]), record["turns"])
        if want is None:  # a zero-variance group: no credit, no share
            assert rows.loc[rid, shares].isna().all()
            continue
        assert rows.loc[rid, shares].to_numpy(dtype=float) == pytest.approx(want, abs=1e-6)
        compared += 1
    assert compared >= 18 and (rows["turn_share_calls"] > 0).any() and (rows["turn_share_last"] < 1).any()

    final = explorer.rollout_table(handle, "agent", explorer.ExplorerQuery(estimator="grpo", limit=None))
    final_rows = final.rows.set_index("rollout_id")
    for group in sorted(set(batch.group_ids.tolist()))[:4]:
        by_turn = turns.group_turns(handle, "agent", int(group), "grpo")
        for rid, own in by_turn.groupby("rollout_id"):
            assistant = own[own["role"] == "assistant"]
            if assistant["abs_share"].isna().all():
                assert final_rows.loc[rid, shares].isna().all()
                continue
            assert assistant["abs_share"].sum() == pytest.approx(1.0)  # the tool's tokens hold none of it
            called = own["role"].shift(-1).isin(["tool", "environment"])
            want = [assistant["abs_share"].iloc[0], assistant["abs_share"].iloc[-1]]
            want.append(own.loc[called & (own["role"] == "assistant"), "abs_share"].sum())
            assert final_rows.loc[rid, shares].to_numpy(dtype=float) == pytest.approx(want, abs=1e-6)
    assert "turn_share_first" not in explorer.table_columns(handle, "demo", query)


def test_the_tool_loop_driver_reproduces_the_shipped_run(tmp_path):
    """backend.demo.agent samples through backend.models.tool_loop, the loop resampling and the teacher
    continue episodes with: its first step is the shipped run's, token for token."""
    out = tmp_path / "agent.jsonl"
    agent.main(["--steps", "1", "--out", str(out)])
    made = [json.loads(line) for line in out.open()]
    shipped = [json.loads(line) for line in SAMPLE.open()][: len(made)]
    assert len(made) == 24
    assert made == shipped
    assert json.loads(out.with_suffix(".json").read_text())["environment"] == "calculator"
