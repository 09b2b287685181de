"""The two bundled runs recorded from TRL's GRPOTrainer by our recorder (scripts/record_sample_runs.py):
`kl-0.0` and `kl-0.2` differ in the KL coefficient β alone, so `creditlens compare-runs` names `beta` as the
one configuration key that differs, and their scores are the script's reward functions of the recorded
text."""

from __future__ import annotations

import json

import pytest

from backend.store import Store
from scripts.record_sample_runs import GENERATIONS, PROMPTS_PER_STEP, STEPS, format, task
from tests.conftest import run_cli_here

RUNS = ("kl-0.0", "kl-0.2")


@pytest.fixture(scope="module")
def compared(bundled_template) -> list[dict]:
    done = run_cli_here(
        "compare-runs", "--db", bundled_template, "--run", RUNS[0], "--run", RUNS[1], "--json"
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_pair_differs_in_beta_alone(compared):
    differing = {k for row in compared for k in row if k.startswith("config.")}
    assert differing == {"config.beta"}
    assert [row["config.beta"] for row in compared] == [0.0, 0.2]
    for row in compared:
        assert row["steps"] == STEPS and row["rollouts"] == STEPS * PROMPTS_PER_STEP * GENERATIONS
        assert row["config_source"].startswith("trl args")
    # TRL computes no reference logprobs at beta 0: a KL only on the run that has one
    assert compared[0]["last_kl"] is None and compared[1]["last_kl"] is not None


def test_the_scores_are_the_reward_functions_of_the_recorded_text(bundled_template):
    with Store(bundled_template, read_only=True) as store:
        for run in RUNS:
            rows = store.rollout_index(run)
            assert {"task", "format"} <= set(store.channels_of(store.run_id(run)))
            prompts, responses = rows["prompt"].tolist(), rows["response"].tolist()
            assert rows["task"].tolist() == task(prompts, responses), run
            assert rows["format"].tolist() == format(responses), run


def test_the_recorded_runs_carry_truncation_as_trl_counts_it(bundled_template):
    """Each recorded completion says whether it was cut at max_completion_length (48): its last token is
    neither the end token nor padding, TRL's `completions/clipped_ratio` rule. The Explorer's flag, the
    trends' truncated_share and the truncation monitor read it."""
    stops = {1, 0}  # the demo policy's <eos> and <pad>
    with Store(bundled_template, read_only=True) as store:
        cut = {
            run: [
                int(ids[-1]) not in stops
                for (ids,) in store.con.execute(
                    "SELECT token_ids FROM rollouts WHERE run_id = ? ORDER BY rollout_id", [store.run_id(run)]
                ).fetchall()
            ]
            for run in RUNS
        }
    for run in RUNS:
        listed = json.loads(run_cli_here("rollouts", "--db", bundled_template, "--run", run, "--json").stdout)
        listed.sort(key=lambda r: r["rollout_id"])
        assert [r["truncated"] for r in listed] == cut[run]
        assert [(r["step"], r["length"]) for r in listed if r["truncated"]] == [(1, 48), (4, 48)]
        trends = json.loads(run_cli_here("trends", "--db", bundled_template, "--run", run, "--json").stdout)
        assert [t["truncated_share"] for t in trends] == [0.125, 0.0, 0.0, 0.125, 0.0, 0.0]
        done = run_cli_here("monitor", "--db", bundled_template, "--run", run)
        assert "does not record truncation" not in done.stdout + done.stderr
