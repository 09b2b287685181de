"""The arithmetic step verifier on hand-written steps, its projection onto tokens, the step-verifier
registry, and the demo run's process channel."""

import json
from pathlib import Path

import pytest

from backend.core.errors import InputError
from backend.demo.process import with_process
from backend.rewards import evaluate
from backend.rewards.evaluate import process_channel
from backend.rewards.registry import get_step_verifier, run_step_verifier, step_verifier_names
from backend.rewards.steps import Step, arithmetic_steps, first_wrong, step_token_rewards

DEMO = Path(__file__).resolve().parents[3] / "sample_runs" / "demo_run.jsonl"


def verdicts(prompt, response, truth=None):
    return [(s.score, s.note) for s in arithmetic_steps(prompt, response, truth)]


def test_a_correct_solution_checks_line_by_line():
    response = "7+5=12 carry 1\n4+8+1=13 carry 1\n8+3+1=12 carry 1\n#### 1232"
    steps = arithmetic_steps("847+385=?\n", response, 1232)
    assert [s.score for s in steps] == [0.0, 0.0, 0.0, 0.0]
    assert [(s.start, s.end) for s in steps] == [(0, 15), (15, 32), (32, 49), (49, 58)]  # newline kept
    assert first_wrong(steps) is None


@pytest.mark.parametrize(
    ("response", "wrong", "note"),
    [
        ("4+8=13 carry 1\n8+4+1=13 carry 1\n#### 133", [0, 2], "4+8 is 12, not 13"),  # a wrong sum
        ("4+8=12\n8+4=12 carry 1\n#### 122", [0, 2], "12 carries 1, not 0"),  # a carry not announced
        ("4+8=12 carry 1\n8+4=12 carry 1\n#### 122", [1, 2], "carry in 0, but the line above carried 1"),
        ("4+8=12 carry 1\n8+5+1=14 carry 1\n#### 142", [1, 2], "column 2 adds 8+4, not 8+5"),
        ("4+8=12 carry 1\n8+4+1=13 carry 1\n1+0+1=2\n#### 232", [2, 3], "column 3 does not exist"),
        ("4+8=12 carry 1\n8+4+1=13 carry 1\n#### 123", [2], "answer 123, expected 132"),
        ("4+8=12 carry 1\n6=14 carry 1\n#### 132", [1], "neither a column sum nor the answer"),
        ("4+8=12 carry 1\n8+4+1=13 carry 1\nClearly!!7", [2], "answer 7, expected 132"),
    ],
)
def test_each_kind_of_wrong_step_is_found_where_it_is_made(response, wrong, note):
    steps = arithmetic_steps("84+48=?\n", response, "132")
    assert [i for i, s in enumerate(steps) if s.score < 0] == wrong
    assert note in steps[wrong[0]].note
    assert all(s.score == 0.0 for i, s in enumerate(steps) if i not in wrong)


def test_noise_claims_nothing_and_errors_are_not_propagated():
    # style noise around a correct line, a filler line with no digits: nothing wrong
    clean = "Obviously!!! 4+8=12 carry 1\nlet me think, let me think\nso so 8+4+1=13 carry 1\nWow!!! #### 132"
    assert [s for s, _ in verdicts("84+48=?\n", clean, 132)] == [0.0] * 4
    # line 1 carries 0 after 12 (wrong); line 2 then correctly takes no carry in and is judged on its own
    assert [s for s, _ in verdicts("84+48=?\n", "4+8=12\n8+4=12 carry 1\n#### 122", 132)] == [-1.0, 0.0, -1.0]


def test_without_a_parsable_prompt_sums_and_carries_are_still_checked():
    steps = verdicts("add these: 84 and 48", "4+8=12 carry 1\n9+9+1=19 carry 1\n#### 192", None)
    assert steps[0][0] == steps[1][0] == 0.0  # no column digits to compare with
    assert steps[2] == (0.0, "answer line (no ground truth to check it against)")
    assert verdicts(None, "4+8=11 carry 1", None)[0] == (-1.0, "4+8 is 12, not 11")


def test_scores_land_on_the_token_ending_each_step():
    response = "4+8=12 carry 1\n8+4+1=14 carry 1\n#### 142"
    steps = arithmetic_steps("84+48=?\n", response, 132)
    chars = list(response)
    rewards = step_token_rewards(steps, chars)
    assert [i for i, r in enumerate(rewards) if r] == [31, 39] and rewards[31] == rewards[39] == -1.0
    # subword tokens: the newline that ends line 2 sits inside "\n##", the token that holds it
    pieces = ["4+8", "=12", " carry", " 1", "\n8", "+4+1", "=14", " carry", " 1", "\n##", "## ", "142"]
    assert "".join(pieces) == response
    local = step_token_rewards(steps, pieces)
    assert local == [0.0] * 9 + [-1.0, 0.0, -1.0]


def test_process_channel_sums_its_token_rewards_and_evaluate_adds_it():
    tokens = list("4+8=13 carry 1\n8+4+1=14 carry 1\n#### 142")
    score, local, steps = process_channel("84+48=?\n", "".join(tokens), 132, tokens, "arithmetic_steps")
    assert score == sum(local) == -3.0 and len(local) == len(tokens) and len(steps) == 3
    verdict = evaluate("".join(tokens), 132, tokens, prompt="84+48=?\n", step_verifier="arithmetic_steps")
    assert verdict.scores["process"] == -3.0 and verdict.token_rewards["process"] == local
    assert "process" not in evaluate("".join(tokens), 132, tokens).scores  # only when asked


def user_steps(prompt, response, ground_truth):
    """A user's step verifier (module:function): every line is wrong."""
    return [Step(0, len(response), -1.0, "all wrong")]


def user_bad(prompt, response, ground_truth):
    return [Step(0, len(response) + 5, 0.0, "past the end")]


def test_step_verifier_registry():
    assert "arithmetic_steps" in step_verifier_names()
    with pytest.raises(InputError, match="unknown step verifier 'nope'; known: arithmetic_steps"):
        get_step_verifier("nope")
    fn = get_step_verifier("tests.backend.rewards.test_steps:user_steps")
    assert run_step_verifier(fn, "p", "abc", None) == [Step(0, 3, -1.0, "all wrong")]
    bad = get_step_verifier("tests.backend.rewards.test_steps:user_bad")
    with pytest.raises(InputError, match=r"step 0 spans characters \[0, 8\)"):
        run_step_verifier(bad, "p", "abc", None, "user_bad")


def test_the_demo_runs_process_channel_is_what_the_script_computes():
    records = [json.loads(line) for line in DEMO.read_text().splitlines()]
    assert all(with_process(r) == r for r in records)  # the shipped file is the script's output
    wrong = [r for r in records if r["rewards"]["process"] < 0]
    assert 200 < len(wrong) < len(records)
    for r in records:
        assert sum(r["token_rewards"]["process"]) == r["rewards"]["process"]
        assert len(r["token_rewards"]["process"]) == len(r["token_ids"])
