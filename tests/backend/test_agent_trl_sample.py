"""The bundled agent run made by TRL's own tool loop (`agent-trl`: `GRPOTrainer(tools=[calculator])` on the
tool-calling demo policy, recorded by the recorder; scripts/record_agent_trl.py): it imports with the
recorded `loss_mask` (TRL's tool mask) and turns, every estimator that runs on it gives the calculator's
tokens exactly 0, and each tool turn is the calculator's answer to the call before it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from backend.demo.chat import calculator
from backend.estimators import registry
from backend.store import Store
from scripts.record_agent_trl import GENERATIONS, PROMPTS_PER_STEP, RUN, STEPS

SAMPLES = Path(__file__).resolve().parents[2] / "sample_runs"
FOLDER = SAMPLES / "recorded" / RUN
CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(.*)")  # the response template's tool-call name, then its body


@pytest.fixture(scope="module")
def batch(bundled_template):
    with Store(bundled_template, read_only=True) as store:
        return store.load_batch(RUN)


@pytest.fixture(scope="module")
def recorded() -> list[dict]:
    """The step files the recorder wrote, in rollout order."""
    return [row for path in sorted(FOLDER.glob("*.parquet")) for row in pq.read_table(path).to_pylist()]


def test_the_run_is_declared_beside_the_other_agent_run():
    manifest = json.loads((SAMPLES / "agent_trl.json").read_text())
    assert manifest["run"] == RUN and manifest["file"] == f"recorded/{RUN}"
    assert manifest["model"] == "demo-tool-policy" and "tools=[calculator]" in manifest["source"]
    assert (SAMPLES / "agent_run.json").exists()


def test_it_imports_with_trls_tool_mask_and_turns(batch, recorded):
    assert len(recorded) == STEPS * PROMPTS_PER_STEP * GENERATIONS == len(batch.rollout_ids)
    assert batch.loss_mask is not None and batch.turns is not None
    for i, row in enumerate(recorded):
        n = int(batch.lengths[i])
        assert batch.loss_mask[i, :n].int().tolist() == row["loss_mask"]
        roles = [t["role"] for t in row["turns"]]
        assert set(roles) <= {"assistant", "tool"} and roles[0] == "assistant"
    tool_turns = sum(t["role"] == "tool" for row in recorded for t in row["turns"])
    assert tool_turns >= len(recorded), "fewer tool calls than rollouts"


def test_every_estimator_gives_the_tool_tokens_zero(batch):
    untrained = batch.response_mask & ~batch.loss_mask  # (B, T)
    assert int(untrained.sum()) > 300
    names = registry.supported(batch)
    assert {"turn_credit", "grpo", "logged", "prefix_tree"} <= set(names)
    assert len(names) >= 25
    for name in names:
        adv = registry.estimate(name, batch).advantages  # (B, T)
        assert torch.equal(adv[untrained], torch.zeros(int(untrained.sum()))), name
    grpo = registry.estimate("grpo", batch).advantages
    assert (grpo[batch.response_mask & batch.loss_mask] != 0).any()


def test_each_tool_turn_answers_the_call_before_it(recorded):
    """The tool's tokens read `=<answer>\\n>` (the chat format of backend.demo.chat, then the next turn's
    generation prompt): the calculator's answer to the assistant's `@calculator x=...` line before them, or
    TRL's error where the policy named a tool that does not exist (`_tool_call_loop`)."""
    checked = misnamed = 0
    for row in recorded:
        texts = ["".join(row["tokens"][t["start"] : t["end"]]) for t in row["turns"]]
        for k, turn in enumerate(row["turns"][1:], start=1):
            if turn["role"] != "tool":
                continue
            name, arguments = CALL.match(texts[k - 1].split("@")[-1].split("\n")[0]).groups()
            if name == "calculator":
                x = dict(a.split("=", 1) for a in arguments.split(" ") if "=" in a).get("x", "")
                assert texts[k] == f"={calculator(x)}\n>"
            else:
                assert texts[k] == f"={{'error': 'Tool {name} not found.'}}\n>"
                misnamed += 1
            checked += 1
    assert checked >= len(recorded) and misnamed < checked / 10
