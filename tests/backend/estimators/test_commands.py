"""`creditlens estimators` and `creditlens estimate` end to end (a real store file)."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import torch

from backend.cli import main
from backend.estimators import registry
from tests.conftest import make_records


def test_estimators_json_lists_every_name_with_fields(capsys):
    assert main(["estimators", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in data] == registry.names()
    recency = next(d for d in data if d["name"] == "recency")
    kappa = next(f for f in recency["fields"] if f["name"] == "kappa")
    assert kappa["default"] == 0.97 and kappa["low"] > 0 and kappa["high"] == 1.0 and kappa["help"]
    outcome = next(f for f in recency["fields"] if f["name"] == "outcome")
    assert outcome["choices"] == ["grpo", "dr_grpo", "rloo"]
    assert main(["estimators"]) == 0
    assert "prefix_tree" in capsys.readouterr().out


@pytest.fixture
def stored_run(db_path):
    from backend.ingest import import_records
    from backend.store import Store

    with Store(db_path) as store:
        import_records(store, "r1", make_records(n_groups=3, group_size=4))
    return db_path


def test_estimate_writes_one_row_per_real_token(stored_run, tmp_path, capsys):
    out = tmp_path / "adv.parquet"
    code = main(["estimate", "--db", str(stored_run), "--run", "r1", "--estimator", "recency",
                 "--set", "kappa=0.5", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    table = pq.read_table(out).to_pandas()
    assert list(table.columns) == ["rollout_id", "group_id", "pos", "token_id", "token", "advantage"]
    from backend.store import Store

    with Store(stored_run, read_only=True) as store:
        batch = store.load_batch("r1")
    assert len(table) == int(batch.response_mask.sum())
    expected = registry.estimate("recency", batch, kappa=0.5).advantages[batch.response_mask]
    torch.testing.assert_close(torch.tensor(table["advantage"].to_numpy()), expected)
    first = table[table.rollout_id == int(batch.rollout_ids[0])]
    assert first["pos"].tolist() == list(range(len(first)))
    assert first["token"].tolist() == batch.tokens[0]


def test_estimate_channel_and_bad_input(stored_run, tmp_path, capsys):
    out = tmp_path / "a.parquet"
    assert main(["estimate", "--db", str(stored_run), "--run", "r1", "--estimator", "grpo",
                 "--channel", "style", "--out", str(out)]) == 0
    bad = [
        (["--estimator", "nope"], "unknown estimator 'nope'"),
        (["--estimator", "recency", "--set", "kappa=2"], "kappa"),
        (["--estimator", "recency", "--set", "kappa"], "KEY=VALUE"),
        (["--estimator", "grpo", "--channel", "safety"], "no scores for channel 'safety'"),
        (["--estimator", "suffix_mc"], "resample"),
    ]
    for extra, message in bad:
        target = tmp_path / "bad.parquet"
        code = main(["estimate", "--db", str(stored_run), "--run", "r1", "--out", str(target), *extra])
        err = capsys.readouterr().err
        assert code == 2 and message in err, (extra, err)
        assert not target.exists()
    code = main(["estimate", "--db", str(stored_run), "--run", "missing", "--estimator", "grpo",
                 "--out", str(tmp_path / "m.parquet")])
    assert code == 2
