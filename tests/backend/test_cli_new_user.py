"""What a new user hit on the command line, each pinned: the tune replay on a summed channel, `--offset`
without `--limit`, the histogram's `where` read back by `rollouts --where`, a missing group named, `tune`'s
ranges and start β, a file that is not a store, the filtered count, argparse's errors in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import creditlens
from backend.core.arrays import to_tensor
from backend.views import reward_histogram
from tests.conftest import reads_share_one_instance, run_cli_here, write_jsonl

# agent-trl is left out: on a fresh store its first `rollouts --where` writes a cache (a trainer-made run with
# turns), which waits on the read-only instance the histogram test holds until the test times out.
BUNDLED = ("demo", "agent", "oracle", "kl-0.0", "kl-0.2")


def _one_error_line(done, *words: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def test_arrays_reach_torch_whatever_their_strides():
    """A reversed or transposed view (what a pivoted, reindexed frame's `to_numpy()` can be) and a read-only
    array (zero-copy from Arrow) become tensors with the same values."""
    base = np.arange(12, dtype=np.float64).reshape(3, 4)
    frozen = base.copy()
    frozen.flags.writeable = False
    for array in (base[:, ::-1], base[::-1], base.T, base[:, ::2], frozen):
        tensor = to_tensor(array, torch.float64)
        assert tensor.is_contiguous() and torch.equal(
            tensor, torch.tensor(array.tolist(), dtype=torch.float64)
        )


def test_tune_replays_a_summed_channel_in_any_tau_order(bundled_db):
    """`--channel all --tau task=0.2` on a recorded TRL run ended in a traceback (a negative stride)."""
    for extra in ([], ["--violation", "format=0.5"]):
        tune = ("tune", "--db", bundled_db, "--run", "kl-0.2", "--channel", "all", "--no-effect")
        done = run_cli_here(*tune, "--tau", "task=0.2", *extra)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert "step 6     task" in done.stdout


def test_offset_alone_pages_from_the_offset(bundled_db):
    def ids(*extra) -> list[int]:
        done = run_cli_here("rollouts", "--db", bundled_db, "--run", "demo", "--json", *extra)
        assert done.returncode == 0, done.stderr
        return [row["rollout_id"] for row in json.loads(done.stdout)]

    assert ids("--offset", 440) == list(range(440, 448))
    assert ids("--offset", 10**9) == [] and ids("--offset", 10**30) == []
    assert ids("--limit", 10**30) == list(range(448))
    assert creditlens.open(bundled_db).run("demo").rollouts(offset=440)["rollout_id"].tolist() == list(
        range(440, 448)
    )


def test_a_where_with_a_float32_reward_is_short_and_exact():
    """Rewards logged as float32 (-0.47999998927116394) get bounds of a few digits that still separate each
    value from its neighbours, in value bins and in range bins."""
    rng = np.random.default_rng(0)
    values = np.float32([-0.48, -0.3, 0.3, 0.7, 1.0]).astype(np.float64)
    spread = np.float32(rng.normal(size=200)).astype(np.float64)
    for rewards in (np.repeat(values, 3), np.concatenate([[0.3, 0.30000001192092896], values]), spread):
        bins = reward_histogram._edges(rewards, 10)
        held = np.zeros(len(rewards), dtype=int)
        for low, high, closed, _label in bins:
            for bound in (low, high):
                assert len(repr(bound).lstrip("-").replace("0.", "", 1)) <= 9, (bound, bins)
            held += (rewards >= low) & ((rewards <= high) if closed else (rewards < high))
        assert (held == 1).all(), bins  # every reward in exactly one bin


def test_every_histogram_bin_is_listed_by_its_where(bundled_db):
    """`rollouts --where` reads the `where` of every bin of every bundled run as printed and lists exactly the
    rollouts the bin counts."""
    with reads_share_one_instance(bundled_db):
        for run in BUNDLED:
            done = run_cli_here("histogram", "--db", bundled_db, "--run", run, "--json")
            assert done.returncode == 0, done.stderr
            for row in json.loads(done.stdout):
                listed = run_cli_here(
                    "rollouts", "--db", bundled_db, "--run", run, "--json", "--where", row["where"]
                )
                assert listed.returncode == 0, (run, row, listed.stderr)
                rows = json.loads(listed.stdout)
                assert len(rows) == row["rollouts"], (run, row)
                assert {r["step"] for r in rows} == {row["step"]}


def test_float32_rewards_round_trip_through_the_command_line(db_path, tmp_path):
    records = [
        {"prompt": f"p{g}", "response": f"r{k}", "step": g % 2, "rewards": {"task": float(np.float32(v))}}
        for g in range(4)
        for k, v in enumerate([-0.48, 0.3, 0.7, 0.7])
    ]
    path = write_jsonl(tmp_path / "f32.jsonl", records)
    assert run_cli_here("import", path, "--db", db_path, "--run", "f32", "--format", "native").returncode == 0
    bins = json.loads(run_cli_here("histogram", "--db", db_path, "--run", "f32", "--json").stdout)
    assert all("9999" not in b["where"] and "0000001" not in b["where"] for b in bins), bins
    for b in bins:
        rows = json.loads(
            run_cli_here("rollouts", "--db", db_path, "--run", "f32", "--json", "--where", b["where"]).stdout
        )
        assert len(rows) == b["rollouts"], b


def test_a_missing_group_is_named(bundled_db):
    _one_error_line(
        run_cli_here("turns", "--db", bundled_db, "--run", "agent", "--group", 99999), "no group 99999"
    )


def test_tune_refuses_negative_numbers_and_prints_the_start_beta(bundled_db):
    tune = ("tune", "--db", bundled_db, "--run", "demo", "--no-effect")
    _one_error_line(run_cli_here(*tune, "--eta", "-1"), "--eta -1")
    _one_error_line(run_cli_here(*tune, "--beta", "format=-1"), "--beta format=-1")
    _one_error_line(run_cli_here(*tune, "--tau", "format=1.5"), "--tau format=1.5")
    text = run_cli_here(*tune, "--beta", "format=2")
    data = json.loads(run_cli_here(*tune, "--beta", "format=2", "--json").stdout)
    assert data["beta"]["start"]["format"] == 2
    assert "β: format 2 → " in text.stdout.splitlines()[-1], text.stdout


def test_a_file_that_is_not_a_store_is_named(tmp_path):
    path = write_jsonl(tmp_path / "run.jsonl", [{"prompt": "p", "response": "r", "rewards": {"task": 1}}])
    line = _one_error_line(run_cli_here("runs", "--db", path), str(path), "not a Credit Lens store")
    assert "in-memory" not in line


def test_a_filtered_count_says_the_runs_total(bundled_db):
    for option in (["--search", "zzzz"], ["--where", "length>100000"]):
        done = run_cli_here("rollouts", "--db", bundled_db, "--run", "demo", "--json", *option)
        assert done.returncode == 0 and "of 448 in the run" in done.stderr, done.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["rollouts", "--run", "demo"],  # --json or --out required
        ["rollouts", "--run", "demo", "--json", "--limit", "0"],  # the range error of the issue
        ["rollouts", "--run", "demo", "--json", "--bogus"],
        ["tune", "--run", "demo", "--mode", "sideways"],
        ["no-such-command"],
    ],
)
def test_argparse_errors_are_one_line(argv):
    line = _one_error_line(run_cli_here(*argv))
    assert "usage:" not in line and "--help" in line


def test_a_flag_compared_with_a_number_is_refused_in_one_line(bundled_db):
    """Found by the matrix (`--where zero_variance<0`: DuckDB's binder error, a traceback)."""
    rollouts = ("rollouts", "--db", bundled_db, "--run", "agent", "--json", "--where")
    _one_error_line(run_cli_here(*rollouts, "zero_variance<0"), "zero_variance is a flag")
    _one_error_line(run_cli_here(*rollouts, "length=true"), "length holds numbers")
    assert run_cli_here(*rollouts, "zero_variance=true").returncode == 0
