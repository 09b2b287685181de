"""`creditlens estimators` and `creditlens estimate` end to end (a real store file)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from backend.estimators import registry
from backend.ingest import import_records
from backend.store import Store
from tests.conftest import make_records, run_cli_here


def test_estimators_json_lists_every_name_with_fields():
    done = run_cli_here("estimators", "--json")
    assert done.returncode == 0
    data = json.loads(done.stdout)
    assert [d["name"] for d in data] == registry.names()
    recency = next(d for d in data if d["name"] == "recency")
    kappa = next(f for f in recency["fields"] if f["name"] == "kappa")
    assert kappa["default"] == 0.97 and kappa["low"] > 0 and kappa["high"] == 1.0 and kappa["help"]
    outcome = next(f for f in recency["fields"] if f["name"] == "outcome")
    assert outcome["choices"] == ["grpo", "dr_grpo", "rloo"]
    done = run_cli_here("estimators")
    assert done.returncode == 0
    assert "prefix_tree" in done.stdout


def test_estimators_show_sources_and_aliases():
    done = run_cli_here("estimators", "--json")
    assert done.returncode == 0
    data = {d["name"]: d for d in json.loads(done.stdout)}
    assert "xiaolizh1/KTAE" in data["ktae"]["source"] and "hp-luo/STARE" in data["stare"]["source"]
    assert "2508.04349" in data["gtpo"]["source"] and data["entropy_mix"]["source"] == ""
    assert data["decaying_trace"]["aliases"] == ["trace"] and "trace" not in data
    done = run_cli_here("estimators")
    assert done.returncode == 0
    text = done.stdout
    assert "source: KTAE" in text or "source: Sun et al." in text
    assert "deprecated aliases: hapo" in text


def test_estimate_with_a_deprecated_name_warns_and_matches(stored_run, tmp_path):
    registry._WARNED.discard("hapo")
    old, new = tmp_path / "old.parquet", tmp_path / "new.parquet"
    done = run_cli_here(
        "estimate",
        "--db",
        str(stored_run),
        "--run",
        "r1",
        "--estimator",
        "hapo",
        "--out",
        str(old),
        "--no-cache",
    )
    assert done.returncode == 0
    assert "'hapo' is deprecated" in done.stderr
    assert (
        run_cli_here(
            "estimate",
            "--db",
            str(stored_run),
            "--run",
            "r1",
            "--estimator",
            "entropy_mix",
            "--out",
            str(new),
            "--no-cache",
        ).returncode
        == 0
    )
    assert pq.read_table(old).equals(pq.read_table(new))
    cached = tmp_path / "cached.parquet"  # the old name finds the output cached under the new one
    done = run_cli_here(
        "estimate", "--db", str(stored_run), "--run", "r1", "--estimator", "hapo", "--out", str(cached)
    )
    assert done.returncode == 0
    assert "from the store's cache" in done.stdout
    assert pq.read_table(cached).equals(pq.read_table(new))


@pytest.fixture
def stored_run(db_path):
    with Store(db_path) as store:
        import_records(store, "r1", make_records(n_groups=3, group_size=4))
    return db_path


def test_estimate_writes_one_row_per_real_token(stored_run, tmp_path):
    out = tmp_path / "adv.parquet"
    done = run_cli_here(
        "estimate",
        "--db",
        str(stored_run),
        "--run",
        "r1",
        "--estimator",
        "recency",
        "--set",
        "kappa=0.5",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    table = pq.read_table(out).to_pandas()
    columns = ["rollout_id", "group_id", "pos", "token_id", "token", "token_class", "advantage"]
    assert list(table.columns) == columns
    with Store(stored_run, read_only=True) as store:
        batch = store.load_batch("r1")
    assert len(table) == int(batch.response_mask.sum())
    expected = registry.estimate("recency", batch, kappa=0.5).advantages[batch.response_mask]
    torch.testing.assert_close(torch.tensor(table["advantage"].to_numpy()), expected)
    first = table[table.rollout_id == int(batch.rollout_ids[0])]
    assert first["pos"].tolist() == list(range(len(first)))
    assert first["token"].tolist() == batch.tokens[0]


def test_estimate_channel_and_bad_input(stored_run, tmp_path):
    out = tmp_path / "a.parquet"
    assert (
        run_cli_here(
            "estimate",
            "--db",
            str(stored_run),
            "--run",
            "r1",
            "--estimator",
            "grpo",
            "--channel",
            "style",
            "--out",
            str(out),
        ).returncode
        == 0
    )
    bad = [
        (["--estimator", "nope"], "unknown estimator 'nope'"),
        (["--estimator", "recency", "--set", "kappa=2"], "kappa"),
        (["--estimator", "recency", "--set", "kappa"], "KEY=VALUE"),
        (["--estimator", "grpo", "--channel", "safety"], "no scores for channel 'safety'"),
        (["--estimator", "suffix_mc"], "resample"),
    ]
    for extra, message in bad:
        target = tmp_path / "bad.parquet"
        done = run_cli_here("estimate", "--db", str(stored_run), "--run", "r1", "--out", str(target), *extra)
        err = done.stderr
        assert done.returncode == 2 and message in err, (extra, err)
        assert "usage:" not in err, (extra, err)  # the command's error, not argparse's
        assert not target.exists()
    done = run_cli_here(
        "estimate",
        "--db",
        str(stored_run),
        "--run",
        "missing",
        "--estimator",
        "grpo",
        "--out",
        str(tmp_path / "m.parquet"),
    )
    assert done.returncode == 2 and "usage:" not in done.stderr  # the command's error, not argparse's


def _estimate(db, out, *extra) -> str:
    """`creditlens estimate` of the entropy estimator into `out`; returns what it printed."""
    done = run_cli_here(
        "estimate", "--db", str(db), "--run", "r1", "--estimator", "entropy", "--out", str(out), *extra
    )
    assert done.returncode == 0
    return done.stdout


def test_estimate_reuses_the_store_cache_until_the_inputs_change(stored_run, tmp_path):
    assert "(computed)" in _estimate(stored_run, tmp_path / "1.parquet")
    first = pq.read_table(tmp_path / "1.parquet").to_pandas()
    assert "(from the store's cache)" in _estimate(stored_run, tmp_path / "2.parquet")
    again = pq.read_table(tmp_path / "2.parquet").to_pandas()
    assert again.equals(first)
    another = _estimate(stored_run, tmp_path / "3.parquet", "--set", "p=2")  # another config: its own entry
    assert "(computed)" in another
    assert "(computed)" in _estimate(stored_run, tmp_path / "4.parquet", "--no-cache")

    # Rescoring a rollout changes the entropies the estimator reads: the cached outputs are dropped.
    with Store(stored_run) as store:
        n = len(store.rollout("r1", 0)["token_ids"])
        store.update_token_arrays("r1", {0: {"entropies": [5.0] * n}})
    assert "(computed)" in _estimate(stored_run, tmp_path / "5.parquet")
    fresh = pq.read_table(tmp_path / "5.parquet").to_pandas()
    assert not fresh.equals(first)

    # New resampling results drop them too (suffix_mc and value_source=mc read those).
    assert "(from the store's cache)" in _estimate(stored_run, tmp_path / "6.parquet")
    with Store(stored_run) as store:
        store.save_resample("r1", 0, pa.table({"pos": [0], "sample_idx": [0], "seed": [1], "reward": [1.0]}))
    assert "(computed)" in _estimate(stored_run, tmp_path / "7.parquet")


def test_appending_rollouts_drops_the_cache(stored_run, tmp_path):
    _estimate(stored_run, tmp_path / "1.parquet")
    with Store(stored_run) as store:
        import_records(store, "r1", make_records(n_groups=1, group_size=4, seed=8), append=True)
        assert store.con.execute("SELECT count(*) FROM estimates").fetchall() == [(0,)]
    assert "(computed)" in _estimate(stored_run, tmp_path / "2.parquet")
    table = pq.read_table(tmp_path / "2.parquet").to_pandas()
    assert table["rollout_id"].nunique() == 16
