"""An agent run turn by turn (issue 44, `backend.views.turns`): the Trends view's credit share by assistant
turn index and the Group view's aligned turns, on the bundled calculator run. `creditlens turns` and
`creditlens.open().run(...).turns()` give the same rows; tool turns are listed, untrained and uncredited."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import creditlens
from backend.store import StoreHandle
from backend.views import turns
from tests.conftest import copy_store, run_cli_here


@pytest.fixture(scope="module")
def handle(bundled_template, tmp_path_factory):
    return StoreHandle(copy_store(bundled_template, tmp_path_factory.mktemp("turns") / "runs.duckdb"))


def test_group_turns_list_every_turn_and_credit_only_the_policys(handle):
    rows = turns.group_turns(handle, "agent", 1, "turn_credit")
    assert set(rows["role"]) == {"assistant", "tool"}
    tool = rows[rows["role"] == "tool"]
    assert not tool["trained"].any()
    assert tool["mean_advantage"].isna().all() and tool["abs_share"].isna().all()
    assert tool["text"].str.startswith("calc: ").all()
    policy = rows[rows["role"] == "assistant"]
    assert policy["trained"].all() and policy["mean_advantage"].notna().all()
    for _, one in policy.groupby("rollout_id"):  # a response's turns share its |A_final|
        assert one["abs_share"].sum() == pytest.approx(1.0)
        assert one["assistant_turn"].tolist() == list(range(1, len(one) + 1))
    for _, one in rows.groupby("rollout_id"):  # the turns tile each response in order
        assert one["start"].iloc[1:].tolist() == one["end"].iloc[:-1].tolist()


def test_turn_shares_are_the_group_turns_summed_and_sum_to_one_per_step(handle):
    shares = turns.turn_shares(handle, "agent", "turn_credit")
    assert list(shares.groupby("step")["share"].sum().round(9).unique()) == [1.0]
    assert shares["turn"].max() >= 2  # multi-turn: more than one assistant turn index
    with handle.read() as store:
        ids = store.load_batch("agent", fields=())
    groups = sorted(set(ids.group_ids.tolist()))
    steps = dict(zip(ids.rollout_ids.tolist(), ids.steps.tolist(), strict=True))
    every = pd.concat([turns.group_turns(handle, "agent", g, "turn_credit") for g in groups])
    policy = every[every["role"] == "assistant"].copy()
    policy["step"] = policy["rollout_id"].map(steps)
    rollouts = policy.groupby(["step", "assistant_turn"])["rollout_id"].nunique()
    tokens = policy.groupby(["step", "assistant_turn"])["tokens"].sum()
    by_key = shares.set_index(["step", "turn"])
    assert by_key["rollouts"].tolist() == rollouts.tolist()
    assert by_key["tokens"].tolist() == tokens.tolist()
    keys = [policy["step"], policy["assistant_turn"]]
    mean = (policy["mean_advantage"] * policy["tokens"]).groupby(keys).sum()
    np.testing.assert_allclose(by_key["mean_advantage"].values, (mean / tokens).values, atol=1e-6)


def test_the_command_and_the_python_api_give_the_same_rows(handle):
    db = handle.path
    want = creditlens.open(db).run("agent").turns()  # turn_shares(handle, "agent", "grpo")
    assert want.columns.tolist() == turns.TURN_SHARE_COLUMNS and len(want) >= 6
    cli = run_cli_here("turns", "--db", db, "--run", "agent", "--json")
    assert cli.returncode == 0, cli.stderr
    pd.testing.assert_frame_equal(pd.DataFrame(json.loads(cli.stdout)), want, check_dtype=False)
    group = run_cli_here("turns", "--db", db, "--run", "agent", "--group", "2", "--json")
    rows = pd.DataFrame(json.loads(group.stdout))
    pd.testing.assert_frame_equal(
        rows.drop(columns="assistant_turn"),
        creditlens.open(db).run("agent").turns(group=2).drop(columns="assistant_turn"),
        check_dtype=False,
    )
