"""`creditlens tune` and backend/views/tune.py (issue 43 item 3): violations are scores below a channel's
threshold (a failed 0/1 reward counts, not only a negative score), the replay has one row per logged step
and constrained channel (none before the first step), and a β's effect on the whole run."""

from __future__ import annotations

import json
import math

import pytest

from backend.ingest import import_path
from backend.store import Store, store_handle
from backend.views import tune
from tests.backend.ingest.trl_format_log import run_format_grpo
from tests.backend.ingest.trl_logs import DEMO_POLICY
from tests.conftest import make_records, run_cli_here, write_jsonl


@pytest.mark.parametrize(
    ("low", "high", "binary", "threshold"),
    [(-1.0, 0.0, False, 0.0), (0.0, 1.0, True, 1.0), (0.0, 1.0, False, 0.5), (0.0, 7.0, False, 0.0)],
)
def test_default_threshold_counts_failures_of_a_reward_not_only_penalties(low, high, binary, threshold):
    assert tune.default_threshold(low, high, binary)[0] == threshold


@pytest.fixture(scope="module")
def format_db(tmp_path_factory):
    """A real TRL run (3 steps of 8): `format_ok` 0/1 fails 7 of 8 at step 1, 6 at step 2, 5 at step 3."""
    root = tmp_path_factory.mktemp("trl_format")
    logs = run_format_grpo(root / "trl")
    db = root / "runs.duckdb"
    with Store(db) as store:
        import_path(store, logs, "trl", "trl", model_dir=str(DEMO_POLICY))
    return db


def _tune(db, *args) -> dict:
    done = run_cli_here("tune", "--db", db, "--run", "trl", *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _rates(out: dict, channel: str) -> list[tuple[int, float, float]]:
    return [(r["step"], r["violation_rate"], r["beta"]) for r in out["replay"] if r["channel"] == channel]


def test_tune_counts_a_failed_0_1_reward_as_a_violation(format_db):
    """Before: a violation was a negative score only, so format_ok's rate was 0 at every step and its β
    decayed from 1 to 0.70."""
    for extra in (("--violation", "format_ok=0.5"), ()):  # by default too: 0/1 reward, threshold 1
        out = _tune(format_db, "--channel", "digits_reward", "--no-effect", *extra)
        rows = _rates(out, "format_ok")
        assert [s for s, _, _ in rows] == [1, 2, 3]  # the logged steps; no step 0 (nor −1) before them
        assert rows[0][1] == pytest.approx(0.875)
        assert [r for _, r, _ in rows] == pytest.approx([0.875, 0.75, 0.625])
        betas = [b for _, _, b in rows]
        assert betas == sorted(betas) and betas[0] > 1.0  # rising: violated more often than τ = 0.1
        assert betas[0] == pytest.approx(1 + 0.875 - 0.1, abs=1e-6)
    assert out["thresholds"]["format_ok"]["value"] == 1.0
    assert "0/1 reward" in out["thresholds"]["format_ok"]["why"]


def test_tune_effect_of_a_beta_on_the_run(format_db):
    out = _tune(format_db, "--channel", "digits_reward", "--beta", "format_ok=0", "--effect-of", "beta")
    effect = out["effect"]["run"]
    before, after = effect["before"], effect["after"]
    assert sum(before["channels"].values()) == pytest.approx(1.0)
    assert after["channels"]["format_ok"] == 0.0 and before["channels"]["format_ok"] > 0
    assert sum(v["share"] for v in after["classes"].values()) == pytest.approx(1.0)
    assert sum(v["token_share"] for v in after["classes"].values()) == pytest.approx(1.0)
    assert [s["step"] for s in out["effect"]["steps"]] == [1, 2, 3]
    # the replayed β's effect (the default): format_ok gains weight, so its share of |A| grows
    out = _tune(format_db, "--channel", "digits_reward")
    run = out["effect"]["run"]
    assert out["beta"]["after"]["format_ok"] == out["beta"]["replayed"]["format_ok"] > 1
    assert run["after"]["channels"]["format_ok"] > run["before"]["channels"]["format_ok"]


def test_tune_offers_tau_only_where_a_beta_follows(tmp_path):
    records = make_records(n_groups=2, group_size=4, steps=2)
    db = tmp_path / "runs.duckdb"
    with Store(db) as store:
        import_path(store, write_jsonl(tmp_path / "run.jsonl", records), "r", "native")
    handle = store_handle(db)
    assert "task" not in tune.constrained(handle, "r", "task")
    done = run_cli_here("tune", "--db", db, "--run", "r", "--tau", "task=0.2")
    assert done.returncode == 2 and "--tau task" in done.stderr
    done = run_cli_here("tune", "--db", db, "--run", "r", "--beta", "nope=2")
    assert done.returncode == 2 and "--beta nope" in done.stderr
    done = run_cli_here("tune", "--db", db, "--run", "r", "--violation", "task=x")
    assert done.returncode == 2 and "expected a number" in done.stderr


def test_replay_steps_start_at_the_first_logged_step(bundled_db):
    frame = tune.replay(store_handle(bundled_db), "demo", {"format": 0.1}, 1.0, {"format": 1.0})
    assert frame["step"].min() == 0  # the demo's first step; the β0 row at step −1 is gone
    assert all(len(repr(b)) <= 10 for b in frame["beta"])  # 6 significant digits, not float32 noise
    assert not any(math.isnan(r) for r in frame["violation_rate"])


def test_the_commands_defaults_are_the_backends():
    from backend.cli import tune as tune_command  # noqa: PLC0415 - the command module, beside the backend's

    assert tune_command.MODES == tune.MODES and tune_command.DEFAULT_TAU == tune.DEFAULT_TAU
