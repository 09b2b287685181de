"""`creditlens logged-gap` recomputes with the trainer's own ε and scaling, which the TRL importer and the TRL
recorder keep with every rollout (the run's recipe, backend/credit/as_trained.py). With grpo's ε 1e-6 against
TRL's 1e-4 it reported gaps of up to 3e-4 on a faithful log."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from backend.ingest.trl import TRL_EPSILON
from backend.store import Store
from tests.conftest import run_cli_here, write_jsonl


def _trl_advantages(rewards: np.ndarray, group: int, epsilon: float, scale: str) -> np.ndarray:
    """TRL 1.16's advantage: the summed reward minus its group's mean, divided by the group's std (unbiased,
    as TRL's nanstd) plus ε, or not divided with scale_rewards="none"."""
    grouped = rewards.reshape(-1, group)
    centred = grouped - grouped.mean(axis=1, keepdims=True)
    if scale == "none":
        return centred.reshape(-1)
    return (centred / (grouped.std(axis=1, ddof=1, keepdims=True) + epsilon)).reshape(-1)


def _gaps(done) -> np.ndarray:
    assert done.returncode == 0, done.stderr
    return np.array([json.loads(line)["gap"] for line in done.stdout.splitlines()])


def test_a_trl_log_is_recomputed_with_trls_epsilon(tmp_path):
    rng = np.random.default_rng(0)
    accuracy, style = rng.integers(0, 2, 24).astype(float), rng.random(24).round(2)
    folder = tmp_path / "completions"
    folder.mkdir()
    pd.DataFrame(
        {
            "step": [1] * 24,
            "prompt": [f"p{i // 4}" for i in range(24)],
            "completion": [f"answer {i}" for i in range(24)],
            "accuracy_reward": accuracy,
            "style_reward": style,
            "advantage": _trl_advantages(accuracy + style, 4, 1e-4, "group"),
        }
    ).to_parquet(folder / "completions_00001.parquet")
    db = tmp_path / "runs.duckdb"
    assert run_cli_here("import", tmp_path, "--db", db, "--run", "t", "--quiet").returncode == 0
    with Store(db, read_only=True) as store:
        assert store.rollout("t", 0)["meta"]["advantage_epsilon"] == TRL_EPSILON == 1e-4
        assert store.main_channel("t") == "all"  # TRL trains on the sum of its reward functions
    done = run_cli_here("logged-gap", "--db", db, "--run", "t", "--estimator", "grpo", "--json")
    assert np.abs(_gaps(done)).max() < 1e-6  # before: 1.5e-4
    assert "note: recomputed with the trainer's epsilon=0.0001" in done.stderr
    asked = run_cli_here(
        "logged-gap", "--db", db, "--run", "t", "--estimator", "grpo", "--set", "epsilon=1e-6", "--json"
    )
    assert np.abs(_gaps(asked)).max() > 1e-5 and "trainer's" not in asked.stderr  # --set wins


def _recorded(tmp_path, rewards: np.ndarray, logged: np.ndarray, meta: dict) -> Path:
    """A store with run `rec`: 16 one-channel rollouts in groups of 4, as the recorder writes them."""
    records = [
        {
            "prompt": f"p{i // 4}",
            "response": f"r{i}",
            "token_ids": [i, i + 1],
            "rewards": {"task": float(rewards[i])},
            "logged_advantage": float(logged[i]),
            "meta": meta,
        }
        for i in range(len(rewards))
    ]
    db = tmp_path / "runs.duckdb"
    path: Path = write_jsonl(tmp_path / "step_1.jsonl", records)
    assert run_cli_here("import", path, "--db", db, "--run", "rec", "--quiet").returncode == 0
    return db


def test_a_recorded_run_keeps_its_scaling(tmp_path):
    """The recorder writes each rollout's meta with TRL's scale_rewards and ε: scale_rewards="none" (Dr.
    GRPO: not divided by a std) is recomputed with norm_by_std=false by default."""
    rng = np.random.default_rng(1)
    rewards = rng.integers(0, 2, 16).astype(float)
    logged = _trl_advantages(rewards, 4, TRL_EPSILON, "none")
    meta = {"scale_rewards": "none", "advantage_epsilon": TRL_EPSILON, "policy_step": 0}
    db = _recorded(tmp_path, rewards, logged, meta)
    done = run_cli_here("logged-gap", "--db", db, "--run", "rec", "--estimator", "grpo", "--json")
    assert np.abs(_gaps(done)).max() < 1e-6
    assert "epsilon=0.0001, norm_by_std=False" in done.stderr
    divided = run_cli_here(
        "logged-gap", "--db", db, "--run", "rec", "--estimator", "grpo", "--set", "norm_by_std=true", "--json"
    )
    assert np.abs(_gaps(divided)).max() > 0.1


def test_logged_gap_compares_the_rebuilt_recipe_by_default(tmp_path):
    """Without --estimator, logged-gap recomputes what the trainer did (as_trained, with the recorded
    scale_rewards="none") and finds no gap; as_trained with another scaling finds one."""
    rng = np.random.default_rng(2)
    rewards = rng.integers(0, 3, 16).astype(float)
    logged = _trl_advantages(rewards, 4, TRL_EPSILON, "none")
    meta = {"scale_rewards": "none", "advantage_epsilon": TRL_EPSILON, "reward_weights": [1.0]}
    db = _recorded(tmp_path, rewards, logged, meta)
    done = run_cli_here("logged-gap", "--db", db, "--run", "rec")
    assert done.returncode == 0, done.stderr
    assert "|as_trained - logged|: max 0," in done.stdout.replace("0.00e+00", "0,")  # exact
    other = run_cli_here("logged-gap", "--db", db, "--run", "rec", "--set", "scale=group", "--json")
    assert np.abs(_gaps(other)).max() > 0.1
