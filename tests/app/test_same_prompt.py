"""The same prompt across runs (issue 45 item 4): `creditlens compare-runs --same-prompt` lists the groups
two or more runs were asked one prompt in, and the Compare view draws those groups side by side, a row per
response labelled with its run, on one colour scale. Two runs of the same prompts (make_records: the prompt
depends on the step and group only), a third with other prompts."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import creditlens
from backend.ingest import import_records
from backend.store import Store
from tests.app.conftest import chart, open_app
from tests.conftest import make_records, run_cli_here


@pytest.fixture
def db(app_db):
    with Store(app_db) as store:  # `small` is make_records(n_groups=2, group_size=4, steps=3), seed 0
        import_records(
            store, "again", make_records(n_groups=2, group_size=4, steps=3, seed=7), content_key="a"
        )
    return app_db


def _same(db, *args) -> list[dict]:
    done = run_cli_here(
        "compare-runs",
        "--db",
        db,
        "--run",
        "small",
        "--run",
        "again",
        "--run",
        "demo",
        "--same-prompt",
        *args,
        "--json",
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_command_lists_the_groups_of_each_shared_prompt(db):
    rows = _same(db)
    assert {r["run"] for r in rows} == {"small", "again"}  # the demo was asked none of these prompts
    prompts = list(dict.fromkeys(r["prompt"] for r in rows))
    assert prompts[0] == "step 0 prompt 0: what is 0 + 0?" and len(prompts) == 6  # 3 steps x 2 groups
    for r in rows:
        assert r["responses"] == 4
        assert r["prompt"].startswith(f"step {r['step']} prompt ")
    assert [r["run"] for r in rows if r["prompt"] == prompts[0]] == ["small", "again"]  # the order given
    only = _same(db, "--prompt", prompts[3], "--step", "1")
    assert only == [r for r in rows if r["prompt"] == prompts[3] and r["step"] == 1] and len(only) == 2
    api = creditlens.open(db).same_prompt(["small", "again", "demo"])
    assert json.loads(api.to_json(orient="records")) == rows
    lone = run_cli_here("compare-runs", "--db", db, "--run", "small", "--run", "again", "--step", "1")
    assert lone.returncode == 2 and "--same-prompt" in lone.stderr


def test_compare_draws_each_runs_group_of_the_prompt_on_one_scale(db):
    at = open_app(db, "compare", {"run": "small", "rollout": "0", "runs": "small,again"})
    spec = chart(at, "compare_same_prompt_heatmap")
    labels = " ".join(map(str, spec["layout"]["yaxis"]["ticktext"]))
    assert labels.count("small · #") == 4 and labels.count("again · #") == 4  # one row per response
    assert any("compare-runs --run small --run again --same-prompt --step 0" in c.value for c in at.caption)
    # the rows are each run's Group-view rows (the rollout's prompt: step 0, group 0 in both runs)
    groups = pd.DataFrame(_same(db, "--prompt", "step 0 prompt 0: what is 0 + 0?", "--step", "0"))
    assert groups.set_index("run")["group_id"].to_dict() == {"small": 0, "again": 0}


def test_compare_without_a_shared_prompt_says_so(db):
    at = open_app(db, "compare", {"run": "small", "rollout": "0", "runs": "small,demo"})
    assert any("No prompt is shared" in i.value for i in at.info)


def test_runs_that_ask_a_prompt_at_other_steps_are_shown_each_at_its_latest(db):
    """Runs count their steps their own way (a TRL log starts at 1): with no step that every run asked the
    prompt at, the view opens on each run's latest step that asked it, not on one run alone."""
    later = make_records(n_groups=2, group_size=4, steps=3, seed=9)
    for rec in later:
        rec["step"] += 10  # the same prompts, asked at steps 10-12
    with Store(db) as store:
        import_records(store, "later", later, content_key="later")
    at = open_app(db, "compare", {"run": "small", "rollout": "0", "runs": "small,later"})
    spec = chart(at, "compare_same_prompt_heatmap")
    labels = " ".join(map(str, spec["layout"]["yaxis"]["ticktext"]))
    assert labels.count("small · #") == 4 and labels.count("later · #") == 4
    (caption,) = [c.value for c in at.caption if "latest step asking it" in c.value]  # markdown-escaped
    assert "small step 0" in caption and "later step 10" in caption
