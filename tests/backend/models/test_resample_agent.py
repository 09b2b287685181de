"""Suffix resampling on a multi-turn response. Without the run's environment, a position on a tool's tokens,
or one whose suffix would have to run past a tool's answer, is refused with the reason; positions in the
last assistant turn are resampled. With it (the bundled agent run names the demo's calculator), positions
inside a tool's output are refused and every other position continues the episode through the tool loop
(tests/backend/models/test_resample_tools.py). On the bundled agent run's rollout 31: assistant [0, 6),
tool [6, 14), assistant [14, 41), tool [41, 53), assistant [53, 66)."""

from __future__ import annotations

import pytest

from backend.core.errors import InputError
from backend.models.agent_resample import (
    check_agent_positions,
    resamplable,
    resample_rollout,
    untrained_spans,
)
from backend.store import Store
from tests.conftest import run_cli_here


@pytest.fixture(scope="module")
def rollout(bundled_template) -> dict:
    with Store(bundled_template, read_only=True) as store:
        return store.rollout("agent", 31)


def test_untrained_spans_from_turns_or_from_the_mask_alone(rollout):
    assert untrained_spans(rollout) == [("tool", 6, 14), ("tool", 41, 53)]
    mask_only = {"loss_mask": rollout["loss_mask"], "turns": None}
    assert untrained_spans(mask_only) == [("untrained", 6, 14), ("untrained", 41, 53)]
    assert untrained_spans({"token_ids": [1, 2]}) == []


def test_positions_on_or_before_a_tool_turn_are_refused_with_the_reason(rollout):
    with pytest.raises(
        InputError, match=r"position 8 is on the tool turn's tokens \[6, 14\): not the policy"
    ):
        check_agent_positions([8], rollout)
    with pytest.raises(
        InputError, match=r"position 20: its suffix would need the tool's answer at \[41, 53\)"
    ):
        check_agent_positions([20], rollout)
    with pytest.raises(InputError, match=r"positions from 53 on"):
        check_agent_positions([0], rollout)
    assert check_agent_positions([53, 60, 66], rollout) == [53, 60, 66]
    assert resamplable([0, 8, 20, 55, 66], rollout) == [55, 66]
    with pytest.raises(InputError, match="position 3"):
        resamplable([3, 9], rollout)


def test_resample_rollout_refuses_before_sampling(rollout):
    class NoEngine:  # any use of the engine would fail the test
        def __getattr__(self, name):
            raise AssertionError(f"the engine was used: {name}")

    with pytest.raises(InputError, match="would need the tool's answer"):
        resample_rollout(NoEngine(), rollout, "answer_match", [2], samples=2)


def test_cli_refuses_a_tool_position_before_loading_a_model(bundled_db):
    done = run_cli_here(
        "resample", "--db", str(bundled_db), "--run", "agent", "--rollout", "31", "--positions", "44",
        "--samples", "2", "--json",
    )  # fmt: skip
    assert done.returncode == 2
    assert "position 44 is inside the tool's output [41, 53)" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
