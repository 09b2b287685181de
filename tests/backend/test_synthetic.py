"""The oracle environment: its invariants, determinism, formats, and the qualitative picture."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from backend.evaluation.metrics import batch_metrics
from backend.evaluation.synthetic import (
    SAMPLE_RUN,
    OracleConfig,
    generate,
    native_batches,
    native_records,
    oracle_batch,
    sample_run_lines,
    to_batch,
)
from backend.ingest import import_batches, import_records
from backend.store import Store
from tests.conftest import run_cli_here


@pytest.fixture(scope="module")
def sample():
    return generate(0, OracleConfig(prompts=500, group=8))


def test_exactly_four_keys_outside_the_span(sample):
    assert (sample.key_mask.sum(axis=1) == 4).all()
    assert not (sample.key_mask & sample.style_mask).any()
    tokens = np.asarray(sample.vocabulary)[sample.token_ids]
    assert all(t.startswith("key") for t in tokens[sample.key_mask])
    assert not any(t.startswith("key") for t in tokens[~sample.key_mask])


def test_spans_are_contiguous_3_to_6_and_about_30_percent(sample):
    lengths = sample.style_mask.sum(axis=1)
    violating = lengths > 0
    assert set(np.unique(lengths[violating])) == {3, 4, 5, 6}
    assert 0.27 < violating.mean() < 0.33
    starts = np.diff(np.pad(sample.style_mask.astype(int), ((0, 0), (1, 0))), axis=1) == 1
    assert (starts.sum(axis=1) == violating).all()  # one run per violating response
    assert ((sample.style_kind >= 0) == violating).all()
    assert (sample.style[violating] < 0).all() and (sample.style[~violating] == 0).all()
    assert np.array_equal(sample.style_flags > 0, sample.style_mask)


def test_keys_are_the_high_entropy_tokens_and_spans_low(sample):
    key_h = sample.entropies[sample.key_mask]
    filler_h = sample.entropies[~sample.key_mask & ~sample.style_mask]
    assert key_h.min() > filler_h.max()
    assert sample.entropies[sample.style_mask].max() < np.median(filler_h)


def test_true_credit_sums_to_the_centred_task_score(sample):
    assert np.all(sample.true_credit[~sample.key_mask] == 0)
    centred = sample.task - sample.difficulty
    np.testing.assert_allclose(sample.true_credit.sum(axis=1), centred, atol=1e-6)
    assert set(np.unique(sample.task)) <= {0.0, 0.25, 0.5, 0.75, 1.0}
    np.testing.assert_allclose(sample.true_style_credit.sum(axis=1), sample.style, atol=1e-6)
    # the decision signal reads the credit: clearly correlated on keys, noise elsewhere
    keys = sample.key_mask
    assert np.corrcoef(sample.decision_signal[keys], sample.true_credit[keys])[0, 1] > 0.3


def test_reproducible_by_seed():
    a, b, c = (generate(s, OracleConfig(prompts=20)) for s in (5, 5, 6))
    for field in ("token_ids", "entropies", "task", "style", "true_credit", "decision_signal"):
        assert np.array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.token_ids, c.token_ids)


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="span_min"):
        OracleConfig(span_min=2)
    with pytest.raises(ValueError, match="violation_rate"):
        OracleConfig(violation_rate=1.5)


def test_batch_fields():
    batch = oracle_batch(seed=1, prompts=6, group=4)
    assert (batch.B, batch.T) == (24, 48)
    assert set(batch.scores) == {"task", "style"} and set(batch.token_rewards) == {"style"}
    assert torch.equal(batch.token_rewards["style"], -batch.extras["style_flags"])
    assert set(batch.extras) >= {
        "true_credit",
        "true_style_credit",
        "key_mask",
        "style_mask",
        "decision_signal",
        "style_flags",
    }
    assert batch.entropies is not None and len(batch.tokens[0]) == 48
    assert batch.group_ids.tolist() == [g for g in range(6) for _ in range(4)]
    batch.validate()
    task_only = to_batch(generate(1, OracleConfig(prompts=6, group=4)), channels=("task",))
    assert set(task_only.scores) == {"task"} and not task_only.token_rewards


def test_native_records_are_json_and_match_the_batch():
    records = list(native_records(seeds=2, prompts=3, group=2))
    assert len(records) == 12
    first = json.loads(json.dumps(records[0]))
    for field in (
        "prompt",
        "response",
        "group",
        "step",
        "token_ids",
        "tokens",
        "entropies",
        "rewards",
        "token_rewards",
        "extras",
        "meta",
    ):
        assert field in first
    assert len(first["tokens"]) == len(first["token_ids"]) == len(first["extras"]["true_credit"]) == 48
    assert {r["step"] for r in records} == {0, 1}
    assert len({r["group"] for r in records}) == 6
    batch = oracle_batch(seed=0, prompts=3, group=2)
    assert records[1]["rewards"]["task"] == pytest.approx(float(batch.scores["task"][1]))
    assert records[1]["extras"]["key_mask"] == batch.extras["key_mask"][1].tolist()


def test_one_default_seed_is_the_documented_size():
    # Its generation time is printed by `python -m bench oracle` (a timed assertion here would be flaky).
    batch = to_batch(generate(0))
    assert batch.B == 4000


# Local stand-ins for the registry's broadcast and entropy estimators, so the environment's
# qualitative picture is checked independently of the estimator package.
def _group_z(batch, scores):
    z = torch.zeros_like(scores)
    for g in batch.group_ids.unique():
        rows = batch.group_ids == g
        std = scores[rows].std()
        z[rows] = (scores[rows] - scores[rows].mean()) / (std + 1e-6)
    return z


def _broadcast(batch, scores):
    return _group_z(batch, scores)[:, None] * batch.response_mask


def _entropy(batch, scores):
    weights = batch.entropies / batch.entropies.mean(dim=1, keepdim=True)
    return _broadcast(batch, scores) * weights


def test_qualitative_picture_with_local_estimators():
    batch = oracle_batch(seed=0, prompts=60, group=8)
    task, both = batch.scores["task"], batch.scores["task"] + batch.scores["style"]
    broadcast = batch_metrics(_broadcast(batch, task), batch)
    entropy = batch_metrics(_entropy(batch, task), batch)
    assert broadcast["filler_mass"] > 0.85
    assert entropy["key_recall"] > 0.95 > broadcast["key_recall"]
    assert entropy["spearman"] > broadcast["spearman"]
    single = _entropy(batch, both)
    style = batch.token_rewards["style"]
    split = _entropy(batch, task) + style / style.abs().max()
    single_m = batch_metrics(single, batch, single - _entropy(batch, task))
    split_m = batch_metrics(split, batch, split - _entropy(batch, task))
    assert single_m["style_recall"] < 0.3 < 0.95 < split_m["style_recall"]


def test_bundled_sample_run_is_current():
    folder = Path(__file__).resolve().parents[2] / "sample_runs"
    assert json.loads((folder / "oracle_run.json").read_text()) == SAMPLE_RUN
    bundled = (folder / SAMPLE_RUN["file"]).read_text().splitlines(keepends=True)
    # if this fails, regenerate with backend.evaluation.synthetic.write_sample_run("sample_runs")
    assert bundled == list(sample_run_lines())
    assert len(bundled) == 24 * 8


def test_synth_command_stores_an_openable_run(tmp_path):
    db = tmp_path / "runs.duckdb"
    args = ["synth", "--db", str(db), "--run", "oracle", "--seeds", "2", "--prompts", "5", "--group", "4"]
    done = run_cli_here(*args)
    assert done.returncode == 0
    assert "imported 40 rollouts" in done.stdout
    with Store(db) as store:
        batch = store.load_batch("oracle")
    reference = oracle_batch(seed=1, prompts=5, group=4)
    assert (batch.B, batch.T) == (40, 48)
    assert torch.equal(batch.extras["key_mask"][20:], reference.extras["key_mask"])
    assert torch.allclose(batch.scores["task"][20:], reference.scores["task"])
    assert torch.allclose(batch.extras["true_credit"][20:], reference.extras["true_credit"])
    assert batch.group_ids.unique().numel() == 10  # seeds never share a group
    done = run_cli_here("synth", "--db", str(db), "--run", "x", "--seeds", "0")
    assert done.returncode == 2
    assert "--seeds" in done.stderr and "usage:" not in done.stderr  # the command's error, not argparse's


def test_synth_through_arrow_stores_what_the_records_path_stored(tmp_path):
    """`creditlens synth` imports `native_batches`; the rows equal those of the per-record import of
    `native_records` it replaced (tokens, rewards, extras, meta, groups, record keys)."""
    with Store(tmp_path / "runs.duckdb") as store:
        import_records(store, "records", native_records(seeds=2, prompts=5, group=4))
        import_batches(store, "arrow", native_batches(seeds=2, prompts=5, group=4))
        runs = {name: store.run_id(name) for name in ("records", "arrow")}
        for table in ("rollouts", "groups", "scores", "token_rewards", "token_features"):
            rows = {
                name: store.con.execute(
                    f"SELECT * EXCLUDE (run_id) FROM {table} WHERE run_id = ? ORDER BY ALL", [run_id]
                ).fetchall()
                for name, run_id in runs.items()
            }
            assert rows["records"] == rows["arrow"] and rows["arrow"], table
        keys = store.con.execute(
            "SELECT count(*), count(record_key) FROM rollouts WHERE run_id = ?", [runs["arrow"]]
        ).fetchone()
        assert keys == (40, 0)  # in-memory records have no file position, so no record key, as before
