"""`creditlens attribution` and `Run.attribution` give the same numbers (one function behind both); the
shares follow the run's trainer settings; bad input is one line and exit code 2."""

from __future__ import annotations

import json

import numpy as np
import pytest

import creditlens
from backend.store import Store, store_handle
from backend.views.attribution import attribute, predicted_step, trainer_setup
from tests.conftest import run_cli_here


def test_the_command_and_the_python_api_agree(bundled_db):
    done = run_cli_here(
        "attribution", "--db", bundled_db, "--run", "kl-0.2", "--rollout", 1, "--pos", 4, "--json"
    )
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert (printed["step"], printed["scope"], printed["estimator"]) == (1, "group", "as_trained")
    assert printed["model"]["on_policy"] is True
    assert printed["setup"]["lr"] == 0.001 and printed["setup"]["loss_type"] == "dapo"
    shares = np.array([row["share"] for row in printed["shares"]])
    assert {row["rollout_id"] for row in printed["shares"]} == {0, 1, 2, 3}  # the group of rollout 1
    assert printed["predicted_delta"] == pytest.approx(shares.sum(), rel=1e-5)
    # an outcome advantage: every trained token of a response carries its response's credit
    credit = {(r["rollout_id"], r["advantage"]) for r in printed["shares"] if r["trained"]}
    assert len(credit) == 4

    api = creditlens.open(bundled_db).run("kl-0.2").attribution(1, 4)
    assert api["predicted_delta"] == pytest.approx(printed["predicted_delta"], rel=1e-6)
    assert api["shares"]["share"].to_numpy() == pytest.approx(shares, rel=1e-5, abs=1e-12)

    text = run_cli_here("attribution", "--db", bundled_db, "--run", "kl-0.2", "--rollout", 1, "--pos", 4)
    assert text.returncode == 0 and f"{printed['predicted_delta']:+.3g}" in text.stdout


def test_step_scope_takes_every_rollout_of_the_step(bundled_db):
    done = run_cli_here(
        "attribution",
        "--db",
        bundled_db,
        "--run",
        "kl-0.2",
        "--rollout",
        1,
        "--pos",
        4,
        "--scope",
        "step",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert {row["rollout_id"] for row in json.loads(done.stdout)["shares"]} == set(range(8))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--rollout", 1, "--pos", 999), "rollout 1 has"),
        (("--rollout", 9999, "--pos", 0), "has no rollout 9999"),
        (("--rollout", 12, "--pos", 0), "the checkpoint that sampled step 2 is unknown"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_two(bundled_db, args, message):
    with Store(bundled_db) as store:  # whatever the bundled run ships, step 2's checkpoint is unknown here
        store.con.execute(
            "DELETE FROM step_checkpoints WHERE run_id = ? AND step = 2", [store.run_id("kl-0.2")]
        )
    done = run_cli_here("attribution", "--db", bundled_db, "--run", "kl-0.2", *args)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr
    assert done.stdout == ""


def test_the_trainer_settings_come_from_the_runs_config():
    trl = trainer_setup({"learning_rate": 2e-6, "loss_type": "grpo", "beta": 0.04, "temperature": 0.7})
    assert (trl.lr, trl.loss_type, trl.kl_beta, trl.temperature) == (2e-6, "grpo", 0.04, 0.7)
    unknown = trainer_setup({})
    assert (unknown.lr, unknown.loss_type, unknown.kl_beta) == (1.0, "dapo", 0.0)
    assert any("per unit learning rate" in n for n in unknown.notes)
    assert trainer_setup({"learning_rate": 1e-3}, lr=0.5).lr == 0.5


def test_the_steps_predicted_change_is_the_sum_of_each_tokens_shares(bundled_db):
    handle = store_handle(bundled_db)
    predicted = predicted_step(handle, "kl-0.2", 1)
    assert set(predicted["rollout_id"]) == set(range(8)) and len(predicted) == 254
    one = attribute(handle, "kl-0.2", 1, 4, scope="step")
    row = predicted[(predicted["rollout_id"] == 1) & (predicted["pos"] == 4)].iloc[0]
    shares = one.shares["share"].to_numpy()
    # two float32 routes to one number (backend.models.attribution's tests: within 2e-3 of Σ|share|)
    assert abs(row["predicted"] - shares.sum()) <= 2e-3 * np.abs(shares).sum()
    assert predicted["coefficient"].to_numpy() == pytest.approx(one.shares["coefficient"].to_numpy())


def test_the_step_mode_prints_every_tokens_prediction_as_the_python_api(bundled_db):
    done = run_cli_here("attribution", "--db", bundled_db, "--run", "kl-0.2", "--step", 1, "--json")
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    api = creditlens.open(bundled_db).run("kl-0.2").predicted_change(1)
    assert len(printed) == len(api) == 254
    assert [r["predicted"] for r in printed] == pytest.approx(
        api["predicted"].to_numpy(), rel=1e-5, abs=1e-12
    )
    for args, message in (
        (("--step", 1, "--pos", 3), "either --step or --rollout"),
        ((), "give --rollout and --pos"),
        (("--step", 9), "has no step 9"),
    ):
        bad = run_cli_here("attribution", "--db", bundled_db, "--run", "kl-0.2", *args)
        assert bad.returncode == 2 and message in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
