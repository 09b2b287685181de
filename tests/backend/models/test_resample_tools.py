"""Resampling runs the tool: on the bundled agent run (its environment: the demo's calculator), a suffix from
a position before a tool turn is the rest of the episode through the run's loop. The policy writes its
line, the calculator answers that line (untrained tokens in the suffix), the policy goes on, and the
whole response is scored by the run's verifier. A position inside a tool's output is refused with the
reason. Rollout 31: assistant [0, 6), tool [6, 14), assistant [14, 41), tool [41, 53), assistant [53, 66)."""

from __future__ import annotations

import json

import pytest

from backend.core.errors import InputError
from backend.models import load_engine
from backend.models.agent_resample import check_agent_positions, resample_rollout
from backend.models.environments import CALCULATOR, calculator, get_environment, run_environment
from backend.rewards import get_verifier
from backend.store import Store, checkpoints
from tests.conftest import run_cli_here


@pytest.fixture(scope="module")
def stored(bundled_template):
    """Rollout 31 of the agent run, the run's info and its step's checkpoint."""
    with Store(bundled_template, read_only=True) as store:
        rollout = store.rollout("agent", 31)
        info = store.run_info("agent")
        model = checkpoints.rollout_model(store, "agent", 31).model_dir
    return rollout, info, model


@pytest.fixture(scope="module")
def step_engine(stored):
    return load_engine(stored[2], engine="transformers", device="cpu")


def _check_episode(sample, prefix_text: str, truth) -> None:
    """The sample's transcript: assistant turns each answered by the calculator on that turn's whole line
    (the kept part of an open turn included) until the last, which calls no tool; its reward is the run's
    verifier on the whole response."""
    turns = sample.turns
    assert [t["role"] for t in turns] == ["assistant", "tool"] * (len(turns) // 2) + ["assistant"]
    assert "".join(t["text"] for t in turns) == sample.suffix_text
    line = prefix_text.rsplit("\n", 1)[-1]  # the open turn's kept text
    for k in range(0, len(turns) - 1, 2):
        line += turns[k]["text"]
        assert turns[k + 1]["text"] == calculator(line)  # the tool answered this sample's own line
        line = ""
    assert sample.reward == get_verifier("answer_match")(prefix_text + sample.suffix_text, truth)


def test_the_run_names_its_environment(stored):
    _, info, _ = stored
    assert run_environment(info) is CALCULATOR
    assert run_environment({"meta": {}}) is None


def test_resampling_before_a_tool_turn_runs_the_tool_in_each_sample(stored, step_engine):
    rollout, info, _ = stored
    result = resample_rollout(
        step_engine, rollout, "answer_match", [0, 20], samples=6, environment=run_environment(info)
    )
    assert [(p.pos, p.n) for p in result.positions] == [(0, 6), (20, 6)]
    assert all(0 <= p.value <= 1 for p in result.positions)
    truth = rollout["meta"]["ground_truth"]
    text = step_engine.decode(list(rollout["token_ids"]))
    for sample in result.samples:
        kept = step_engine.decode(list(rollout["token_ids"])[: sample.pos])
        assert text.startswith(kept)
        _check_episode(sample, kept, truth)
    # from 20 the open turn [14, 41) is finished first, then the calculator answers it, in every sample
    assert all(any(t["role"] == "tool" for t in s.turns) for s in result.samples if s.pos == 20)
    assert sum(len(s.turns) > 1 for s in result.samples) >= 10
    # the same seeds draw the same episodes, whichever others share their batches
    again = resample_rollout(step_engine, rollout, "answer_match", [0], samples=6, environment=CALCULATOR)
    assert [s.suffix_ids for s in again.samples] == [s.suffix_ids for s in result.samples if s.pos == 0]


def test_a_position_inside_a_tool_output_is_refused_with_the_reason(stored):
    rollout, _, _ = stored
    with pytest.raises(InputError, match=r"position 44 is inside the tool's output \[41, 53\).*e\.g\. 53"):
        check_agent_positions([44], rollout, tool_loop=True)
    with pytest.raises(InputError, match=r"position 6 is inside the tool's output \[6, 14\)"):
        check_agent_positions([6], rollout, tool_loop=True)
    assert check_agent_positions([0, 5, 14, 20, 40, 53, 66], rollout, tool_loop=True) == [
        0,
        5,
        14,
        20,
        40,
        53,
        66,
    ]


def test_cli_resample_json_shows_the_tool_answers(bundled_db):
    done = run_cli_here(
        "resample", "--db", str(bundled_db), "--run", "agent", "--rollout", "31", "--positions", "14",
        "--samples", "3", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["environment"] == "calculator" and out["on_policy"] is True
    assert [p["n"] for p in out["positions"]] == [3]
    assert len(out["samples"]) == 3
    for sample in out["samples"]:
        tools = [t["text"] for t in sample["turns"] if t["role"] == "tool"]
        assert tools and all(t.startswith("calc: ") for t in tools)
        assert all(t in sample["suffix_text"] for t in tools)
    with Store(bundled_db, read_only=True) as store:  # stored with the tool's answers in the suffix text
        rows = store.resample_values("agent")
    assert len(rows[rows["rollout_id"] == 31]) == 1


def test_environment_command_and_the_hook_for_a_users_tools(bundled_db):
    spec = "tests.backend.models.user_tools:TOOLS"
    env = get_environment(spec)
    assert env.respond('<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>') == (
        "<tool_response>\n5\n</tool_response>\n"
    )
    assert "error" in env.respond('<tool_call>{"name": "add", "arguments": {"a": 2}}</tool_call>')
    assert env.respond("no call here") is None
    assert get_environment("tests.backend.models.user_tools:LINES").name == "lines"
    done = run_cli_here("environment", "--db", str(bundled_db), "--run", "demo", "--set", spec)
    assert done.returncode == 0, done.stderr
    done = run_cli_here("environment", "--db", str(bundled_db), "--run", "demo")
    assert spec in done.stdout
    bad = run_cli_here("environment", "--db", str(bundled_db), "--run", "demo", "--set", "nowhere")
    assert bad.returncode == 2 and "unknown environment 'nowhere'" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    missing = run_cli_here("environment", "--db", str(bundled_db), "--run", "demo", "--set", "no_such_mod:X")
    assert missing.returncode == 2 and "cannot import module 'no_such_mod'" in missing.stderr


def test_a_users_environment_runs_through_the_same_loop(stored, step_engine):
    """The hook's Environment (tests/backend/models/user_tools.py: every line answered `ok`, 3 turns at
    most) continues the agent rollout in place of the calculator: the turn limit and the answers are its."""
    rollout, _, _ = stored
    env = get_environment("tests.backend.models.user_tools:LINES")
    result = resample_rollout(step_engine, rollout, "answer_match", [0], samples=4, environment=env)
    assert len(result.samples) == 4
    for sample in result.samples:
        roles = [t["role"] for t in sample.turns]
        assert roles.count("assistant") <= env.max_turns
        assert all(t["text"] == "ok\n" for t in sample.turns if t["role"] == "tool")
    assert any("tool" in [t["role"] for t in s.turns] for s in result.samples)
