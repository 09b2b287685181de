"""Turn-level truth: the Monte Carlo teacher on the bundled agent run values the start of every assistant
turn, each suffix the rest of the episode through the run's tool loop with the step's own checkpoint; the
calibration check reads V̂ at the first turn per step; and the teacher-bench ranks the agent estimators
(turn_credit, gigpo, progress_advantage, grpo, the token-level ones) against it with the fair metrics."""

from __future__ import annotations

import pytest

from backend.evaluation.teacher_bench import teacher_bench
from backend.models.environments import calculator
from backend.models.teacher import JOB, TeacherSettings, plan_teacher, run_teacher, teacher_positions
from backend.store import Store, StoreHandle

TURNS = [
    {"role": "assistant", "start": 0, "end": 6},
    {"role": "tool", "start": 6, "end": 14},
    {"role": "assistant", "start": 14, "end": 41},
    {"role": "tool", "start": 41, "end": 53},
    {"role": "assistant", "start": 53, "end": 66},
]


def test_turns_positions_are_the_assistant_turn_starts():
    assert teacher_positions("turns", [""] * 66, None, 66, TURNS) == [0, 14, 53]
    assert teacher_positions("turns,every:20", [""] * 66, None, 66, TURNS) == [0, 14, 20, 40, 53, 60]
    assert teacher_positions("turns", [""] * 5, None, 5, None) == [0]


def test_without_an_environment_the_plan_keeps_only_positions_after_the_last_tool_turn(bundled_template):
    with Store(bundled_template, read_only=True) as store:
        with_tools, _ = plan_teacher(
            store, "agent", rollouts=6, positions="turns", seed=0, verifier="answer_match", tool_loop=True
        )
        without, _ = plan_teacher(
            store, "agent", rollouts=6, positions="turns", seed=0, verifier="answer_match"
        )
    for a, b in zip(with_tools, without, strict=True):
        starts = [s for role, s, _ in a.turns if role == "assistant"]
        assert list(a.positions) == starts and a.positions[0] == 0
        last_tool = max((e for role, _, e in a.turns if role != "assistant"), default=0)
        assert all(p >= last_tool for p in b.positions)


@pytest.fixture(scope="module")
def valued(bundled_template, tmp_path_factory):
    """The agent run's teacher at every turn start of 9 rollouts (3 per step), M = 4, in a private store."""
    from tests.conftest import copy_store  # noqa: PLC0415 - the fixture's copy helper

    db = copy_store(bundled_template, tmp_path_factory.mktemp("agent_teacher") / "runs.duckdb")
    handle = StoreHandle(db)
    report = run_teacher(handle, "agent", TeacherSettings(samples=4), rollouts=9, positions="turns", seed=0)
    return handle, report


def test_the_teacher_values_every_turn_start_on_policy_through_the_tool_loop(valued):
    handle, report = valued
    assert report.valued == 9 and not report.cancelled and report.environment == "calculator"
    assert all(m["on_policy"] for m in report.models.values())
    called = 0
    with handle.read() as store:
        samples = store.job_samples("agent", JOB).to_pandas()
        for rid, own in samples.groupby("rollout_id"):
            turns = store.rollout("agent", int(rid))["turns"]
            starts = sorted(t["start"] for t in turns if t["role"] == "assistant")
            assert sorted(own["pos"].unique()) == starts
            assert (own.groupby("pos").size() == 4).all()
            for text in own["suffix_text"]:  # from a turn start: each tool answer is its line's
                lines = text.splitlines(keepends=True)
                for before, line in zip(lines, lines[1:], strict=False):
                    if line.startswith("calc: "):
                        assert line == calculator(before)
                        called += 1
    assert called >= 40


def test_the_turn_level_table_ranks_the_agent_estimators_with_calibration(valued, few_bootstrap_draws):
    handle, _ = valued
    bench = teacher_bench(handle, "agent")
    rows = bench.table.set_index("estimator")
    for name in ("turn_credit", "gigpo", "progress_advantage", "grpo", "entropy", "prefix_tree"):
        assert rows.loc[name, "kind"] == "estimator"
        assert 0 <= rows.loc[name, "ranking_accuracy_per_token"] <= 1
    assert {"chance", "suffix_mc"} <= set(rows.index)
    # per-token means over the trained tokens: broadcast GRPO ties every segment, exactly chance (dividing by
    # the segment's length, its tool tokens made a segment without a tool turn look better)
    assert rows.loc["grpo", "ranking_accuracy_per_token"] == 0.5
    assert bench.n_segments == bench.n_positions  # one segment per valued turn start
    calibration = bench.calibration
    assert list(calibration["step"]) == [0, 1, 2] and (calibration["n"] == 3).all()
    assert calibration["v_empty"].between(0, 1).all() and (calibration["policy"] == "on-policy").all()
