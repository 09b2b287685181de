"""As trained first: on a run a trainer made, every command opens on the advantage that trainer used (its
recipe rebuilt from the run, equal to its logged advantage), and Credit Lens's recombination is a what-if that
names the source of each β (backend/credit/as_trained.py)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from backend.core.run_config import TRL_EPSILON
from backend.credit import as_trained
from backend.store import Store, StoreHandle
from tests.conftest import run_cli_here, write_jsonl

TOLERANCE = 1e-6
"""as_trained against the logged advantage: float32 on both sides, the same operations as TRL; measured 0.0
per rollout on the bundled runs, under 3e-7 where a per-token mean is taken."""
TRAINER_RUNS = ("kl-0.0", "kl-0.2")


def _logged(db, run: str) -> pd.Series:
    with Store(db, read_only=True) as store:
        frame = store.con.execute(
            "SELECT rollout_id, logged_advantage FROM rollouts WHERE run_id = ? ORDER BY rollout_id",
            [store.run_id(run)],
        ).df()
    return frame.set_index("rollout_id")["logged_advantage"]


@pytest.mark.parametrize("run", TRAINER_RUNS)
def test_every_command_opens_on_what_trl_trained_on(bundled_db, tmp_path, run):
    logged = _logged(bundled_db, run)
    assert logged.abs().max() > 0.5  # a run with something to get wrong
    out = tmp_path / "a.parquet"
    done = run_cli_here("estimate", "--db", bundled_db, "--run", run, "--out", out)
    assert done.returncode == 0, done.stderr
    per_rollout = pd.read_parquet(out).groupby("rollout_id")["advantage"].first()
    assert np.abs(per_rollout - logged[per_rollout.index]).max() <= TOLERANCE

    rows = run_cli_here("rollouts", "--db", bundled_db, "--run", run, "--json")
    assert rows.returncode == 0 and "credit: as trained by TRL GRPOTrainer" in rows.stderr
    table = pd.DataFrame(json.loads(rows.stdout))
    assert table["logged_gap"].abs().max() <= TOLERANCE  # the Explorer's own gap column: none

    for rollout in (0, 1, 3):
        done = run_cli_here("explain", "--db", bundled_db, "--run", run, "--rollout", rollout, "--pos", 2)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("as trained by TRL GRPOTrainer: rebuilt from its rewards")
        assert "R = Σ_c w_c R_c = 1×" in done.stdout and "A = (R − mean_G) / (std_G + ε)" in done.stdout
        assert "kl" not in done.stdout.split("why A at pos")[0].split("\n")[1]  # no KL channel column
        data = json.loads(
            run_cli_here("explain", "--db", bundled_db, "--run", run, "--rollout", rollout, "--json").stdout
        )
        assert (
            data["credit"]["kind"] == "as trained"
            and data["credit"]["recipe"]["trainer"] == "TRL GRPOTrainer"
        )
        assert abs(data["final"][0] - logged[rollout]) <= TOLERANCE
        # the channel rows are the trainer's terms: they add up to what was trained
        terms = sum(c["contribution"][0] for c in data["channels"].values())
        assert abs(terms - logged[rollout]) <= TOLERANCE


def test_the_what_if_names_each_beta_and_its_source(bundled_db):
    """kl-0.2's KL channel in the what-if weighs the config's 0.2 (not Credit Lens's 0.05); the demo run,
    which no trainer made, says its 0.05 is Credit Lens's default."""
    done = run_cli_here(
        "explain", "--db", bundled_db, "--run", "kl-0.2", "--rollout", "1", "--estimator", "grpo", "--json"
    )
    credit = json.loads(done.stdout)["credit"]
    assert credit["kind"] == "what-if" and "not what TRL GRPOTrainer trained on" in credit["note"]
    assert credit["betas"]["kl"]["beta"] == 0.2 and "trainer's config" in credit["betas"]["kl"]["source"]
    assert json.loads(done.stdout)["betas"]["kl"] == pytest.approx(0.2)  # and it is the β applied
    tuned = run_cli_here(
        "explain", "--db", bundled_db, "--run", "kl-0.2", "--rollout", "1", "--estimator", "grpo",
        "--beta", "kl=0.5", "--json",
    )  # fmt: skip
    assert json.loads(tuned.stdout)["credit"]["betas"]["kl"] == {"beta": 0.5, "source": "tuned"}
    demo = json.loads(
        run_cli_here("explain", "--db", bundled_db, "--run", "demo", "--rollout", "1", "--json").stdout
    )
    assert demo["estimator"] == "grpo" and demo["credit"]["recipe"] is None
    assert "kl" not in demo["credit"]["betas"] or demo["credit"]["betas"]["kl"]["beta"] == 0.05


def _trl_like(tmp_path, meta: dict, rewards: dict[str, list[float]], logged: list[float] | None = None):
    n = len(next(iter(rewards.values())))
    records = [
        {
            "prompt": f"p{i // 4}",
            "response": f"r{i}",
            "token_ids": [i, i + 1, i + 2],
            "rewards": {c: v[i] for c, v in rewards.items()},
            **({"logged_advantage": logged[i]} if logged is not None else {}),
            "meta": meta,
        }
        for i in range(n)
    ]
    db = tmp_path / "runs.duckdb"
    done = run_cli_here("import", write_jsonl(tmp_path / "step_1.jsonl", records), "--db", db, "--run", "r")
    assert done.returncode == 0, done.stderr
    return db


def test_weighted_reward_functions_are_summed_with_their_weights(tmp_path):
    """Two reward functions weighted 2 and 0.5 (TRL's reward_weights, with the recorder's reward_names):
    as_trained sums them with those weights, and equals TRL's advantage computed here in numpy."""
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 2, 16).astype(float), rng.random(16).round(2)
    summed = (2 * a + 0.5 * b).reshape(-1, 4)
    expected = (summed - summed.mean(1, keepdims=True)) / (summed.std(1, ddof=1, keepdims=True) + TRL_EPSILON)
    meta = {
        "scale_rewards": "group",
        "advantage_epsilon": TRL_EPSILON,
        "reward_weights": [2.0, 0.5],
        "reward_names": ["acc", "style"],
    }
    db = _trl_like(tmp_path, meta, {"acc": list(a), "style": list(b)}, list(expected.reshape(-1)))
    with Store(db, read_only=True) as store:
        found = as_trained.recipe(store, "r")
    assert found.estimator == "as_trained" and dict(found.config)["weights"] == "acc:2,style:0.5"
    done = run_cli_here("logged-gap", "--db", db, "--run", "r", "--json")
    gaps = [abs(json.loads(line)["gap"]) for line in done.stdout.splitlines()]
    assert max(gaps) <= 1e-5, done.stderr
    unweighted = run_cli_here("logged-gap", "--db", db, "--run", "r", "--set", "weights=", "--json")
    assert max(abs(json.loads(line)["gap"]) for line in unweighted.stdout.splitlines()) > 0.1


@pytest.mark.parametrize(
    "meta,why",
    [
        ({"scale_rewards": "batch", "advantage_epsilon": TRL_EPSILON}, "scale_rewards='batch'"),
        ({"scale_rewards": "group", "reward_weights": [2.0, 1.0]}, "which reward function has which"),
    ],
)
def test_a_recipe_that_cannot_be_rebuilt_shows_the_logged_advantage_and_says_why(tmp_path, meta, why):
    rewards = {"acc": [1.0, 0.0, 1.0, 0.0] * 2, "style": [0.5, 0.2, 0.1, 0.0] * 2}
    logged = [0.7, -0.7, 0.3, -0.3] * 2
    db = _trl_like(tmp_path, meta, rewards, logged)
    handle = StoreHandle(db)
    found = as_trained.run_recipe(handle, "r")
    assert found.estimator == "logged" and any(why in n for n in found.notes)
    assert as_trained.default_estimator(handle, "r") == "logged"
    out = tmp_path / "a.parquet"
    assert run_cli_here("estimate", "--db", db, "--run", "r", "--out", out).returncode == 0
    per_rollout = pd.read_parquet(out).groupby("rollout_id")["advantage"].first()
    np.testing.assert_allclose(per_rollout.to_numpy(), logged, atol=1e-7)


def test_a_verl_config_gives_verls_recipe():
    config = {"algorithm.adv_estimator": "grpo", "algorithm.norm_adv_by_std_in_grpo": False}
    found = as_trained._verl(config)
    assert found.trainer == "verl" and dict(found.config) == {
        "epsilon": 1e-6,
        "scale": "none",
        "weights": "task:1",
    }
    assert as_trained._verl({"algorithm.adv_estimator": "gae"}) is None
    assert as_trained._verl({"algorithm.use_kl_in_reward": True}) is None


def test_runs_no_trainer_made_keep_grpo(bundled_template):
    handle = StoreHandle(bundled_template)
    for run in ("demo", "agent", "oracle"):
        assert as_trained.run_recipe(handle, run) is None
        assert as_trained.default_estimator(handle, run) == "grpo"
    for run in TRAINER_RUNS:
        assert as_trained.default_estimator(handle, run) == "as_trained"
