"""Run-scoped estimators that fit a model on the run (token_rm's linear head, rudder, the fitted value probe)
stream in group chunks in two passes (backend.estimators.fitting) and give the in-memory numbers: on the
bundled demo and synthetic oracle runs and on a run whose groups interleave, with chunk sizes that cut at
awkward places, with the fits' token samples both covering the run and cut short."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from backend.core import chunks
from backend.credit import estimates
from backend.estimators import features, fitting, registry, values
from backend.estimators.methods import learned
from backend.ingest import import_records
from backend.store import Store, StoreHandle
from backend.views import explain
from tests.conftest import copy_store, make_records, reads_share_one_instance

FITTED = [
    ("token_rm", {}),
    ("token_rm", {"head": "mlp", "steps": 40}),
    ("rudder", {}),
    ("gae", {"value_source": "fitted"}),
    ("entropy", {"then_gae": True, "value_source": "fitted"}),
    ("token_rm", {"then_gae": True, "value_source": "fitted"}),
    ("entropy_gate", {"base": "token_rm"}),
]


@pytest.fixture(scope="module")
def db(bundled_template, tmp_path_factory) -> Path:
    path = copy_store(bundled_template, tmp_path_factory.mktemp("fit_stream") / "runs.duckdb")
    records = make_records(n_groups=9, group_size=3, seed=7, steps=3)
    random.Random(1).shuffle(records)  # groups interleave in id order
    with Store(path) as store:
        import_records(store, "mixed", records)
    return path


@pytest.fixture
def held(db):
    """The tests that only read (save=False) share one DuckDB instance (tests/conftest.py)."""
    with reads_share_one_instance(db):
        yield


def _group_max(db: Path, run: str) -> int:
    with Store(db, read_only=True) as store:
        return int(store.rollout_keys(run).groupby("group_id").size().max())


def _check_equal(
    handle: StoreHandle, run: str, name: str, overrides: dict, sizes: tuple[int, ...], group_max: int
) -> list[str]:
    config = registry.make_config(name, **overrides)
    whole = estimates.estimate_rollouts(
        handle, run, name, config, use_cache=False, save=False, chunk_rollouts=None
    )
    assert whole.scope == "run"
    notes = []
    for size in sizes:
        streamed = estimates.stream_run(
            handle, run, name, config, chunk_rollouts=size, use_cache=False, save=False
        )
        assert len(streamed.chunks) > 1, (name, overrides, size)
        got, largest = {}, 0
        for batch, adv in streamed:
            got.update(estimates._per_rollout(batch, adv))
            largest = max(largest, batch.B)
        assert got.keys() == whole.advantages.keys()
        for rid, expected in whole.advantages.items():
            np.testing.assert_allclose(
                got[rid],
                expected,
                rtol=1e-5,
                atol=1e-6,
                err_msg=f"{run} {name} {overrides} chunk {size} rollout {rid}",
            )
        # bounded memory: a chunk holds whole groups up to `size` rollouts, for the fitted estimators too
        assert largest <= size + group_max - 1, (name, largest, size)
        assert streamed.notes == whole.notes
        notes = streamed.notes
    return notes


# Chunks: demo's 97 packs 13 groups of 8 (5 chunks, the last of 4 groups; chunks span two steps), as in
# test_estimates_stream.py; oracle: 3 chunks of 8 groups; mixed: 81 interleaved rollouts in 14 and 7 chunks.
@pytest.mark.slow
@pytest.mark.parametrize("run,sizes", [("mixed", (4, 11)), ("demo", (97,)), ("oracle", (61,))])
def test_fitted_estimators_stream_to_the_in_memory_numbers(db, held, run, sizes):
    handle = StoreHandle(db)
    group_max = _group_max(db, run)
    for name, overrides in FITTED:
        _check_equal(handle, run, name, overrides, sizes, group_max)


@pytest.mark.slow
def test_sampled_fits_stream_to_the_in_memory_numbers_and_say_so(db, held, monkeypatch):
    # a sample much smaller than the run: the streamed passes must pick the in-memory rows exactly
    monkeypatch.setattr(values, "MAX_FIT_TOKENS", 301)
    monkeypatch.setattr(learned, "MAX_FIT_TOKENS", 257)
    handle = StoreHandle(db)
    group_max = _group_max(db, "demo")
    notes = _check_equal(handle, "demo", "rudder", {}, (13,), group_max)
    assert any("sample of 257 of the run's" in n for n in notes), notes
    notes = _check_equal(handle, "demo", "gae", {"value_source": "fitted"}, (29,), group_max)
    assert any("fitted value probe fitted on an evenly strided sample of 301" in n for n in notes), notes
    monkeypatch.setattr(learned, "MLP_FIT_TOKENS", 700)
    notes = _check_equal(handle, "demo", "token_rm", {"head": "mlp", "steps": 30}, (23,), group_max)
    assert any(
        "MLP head fitted on an evenly strided sample of whole responses holding about 700" in n for n in notes
    ), notes


def test_token_sample_over_chunks_is_the_in_memory_sample_and_bounded(db):
    with Store(db, read_only=True) as store:
        whole = store.load_batch("oracle")
        layout = store.rollout_lengths("oracle")
        plan = chunks.plan(store.rollout_keys("oracle"), "group", 23)
        run_fit = fitting.RunFit.of_layout(layout)
        n_tokens = int(whole.response_mask.sum())
        assert run_fit.n_tokens == n_tokens
        for max_tokens in (n_tokens + 5, 999, 64):
            expected = fitting.token_sample(whole, max_tokens)
            picked = []
            for chunk in plan:
                batch = store.load_batch("oracle", fields=(), **chunk.load_args())
                batch = dataclasses.replace(batch, run_fit=run_fit)
                picked.append(run_fit.token_numbers(batch)[fitting.token_sample(batch, max_tokens)])
            picked = torch.sort(torch.cat(picked)).values
            assert len(picked) == min(n_tokens, max_tokens)  # the bound on what a sampled fit holds
            assert torch.equal(picked, expected)


def test_ridge_statistics_add_up_over_parts_without_losing_precision():
    gen = torch.Generator().manual_seed(3)
    X = torch.randn((500, 4), generator=gen, dtype=torch.float64)
    X[:, 0] += 1e4  # a large mean: the shifted sums keep the variance exact
    X[:, 2] = 7.0  # a constant column keeps scale 1 and gets no weight
    y = X[:, 1] * 2 - X[:, 3] + torch.randn(500, generator=gen, dtype=torch.float64) * 0.1
    fold = torch.randint(0, 3, (500,), generator=gen)
    W, b = features.RidgeStats.of(X, y, fold, 3).solve(0.5)
    parts = [slice(0, 1), slice(1, 200), slice(200, 200), slice(200, 500)]
    stats = features.RidgeStats.of(X[parts[0]], y[parts[0]], fold[parts[0]], 3)
    for part in parts[1:]:
        stats = stats.merge(features.RidgeStats.of(X[part], y[part], fold[part], 3))
    W2, b2 = stats.solve(0.5)
    torch.testing.assert_close(W2, W, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(b2, b, rtol=1e-6, atol=1e-5)
    assert float(W[:, 2].abs().max()) < 1e-6
    assert float(W[:, 1].min()) > 1.5  # the fit found the signal
    with pytest.raises(ValueError, match="different feature columns"):
        a, b = (features.RidgeStats.of(X, y, fold, 3, (name,) * 4) for name in "ab")
        a.merge(b)


def test_what_still_reads_the_run_at_once(db):
    handle = StoreHandle(db)
    # a step statistic over a run-scoped base is computed over the whole run in memory: kept as one chunk
    stare = registry.make_config("stare", base="token_rm")
    assert fitting.chunk_scope(registry.get("stare"), stare) == "step"
    streamed = estimates.stream_run(handle, "mixed", "stare", stare, chunk_rollouts=4, save=False)
    assert len(streamed.chunks) == 1
    assert fitting.chunk_scope(registry.get("token_rm"), registry.make_config("token_rm")) == "group"
    assert registry.get("token_rm").scope_for(registry.make_config("token_rm")) == "run"


def test_rollout_terms_of_a_fitted_estimator_come_from_its_group_with_the_run_models(db, held):
    handle = StoreHandle(db)
    with Store(db, read_only=True) as store:
        whole = store.load_batch("mixed")
    for name, overrides in (("token_rm", {}), ("gae", {"value_source": "fitted"})):
        config = registry.make_config(name, **overrides)
        assert estimates.fitted_run(handle, "mixed", name, config) is not None
        result = registry.estimate(name, whole, config)
        for row in (0, 13):
            rid = int(whole.rollout_ids[row])
            terms = explain.scoped_terms(handle, "mixed", rid, name, config)
            assert terms["scope"] == "run"
            expected = explain.terms_of(whole, result, row, name, config)["tokens"]
            assert expected.keys() == terms["tokens"].keys()
            for key, values_ in expected.items():
                np.testing.assert_allclose(
                    terms["tokens"][key], values_, rtol=1e-5, atol=1e-6, err_msg=f"{name} {key}"
                )


def test_mlp_head_sample_over_chunks_is_the_in_memory_rows_and_bounded(db, monkeypatch):
    monkeypatch.setattr(learned, "MLP_FIT_TOKENS", 900)
    with Store(db, read_only=True) as store:
        whole = store.load_batch("oracle")
        layout = store.rollout_lengths("oracle")
        plan = chunks.plan(store.rollout_keys("oracle"), "group", 31)
        run_fit = fitting.RunFit.of_layout(layout)
        sample = None
        for chunk in plan:
            batch = dataclasses.replace(store.load_batch("oracle", **chunk.load_args()), run_fit=run_fit)
            X, names = features.token_features(batch)
            fold, k = features.group_folds(batch, 5)
            part = learned.MLPSample.of(batch, X, torch.zeros(batch.B), fold, tuple(names))
            sample = part if sample is None else sample.merge(part)
    expected = learned.mlp_fit_rows(whole.response_mask)
    assert torch.equal(torch.sort(sample.rows).values, expected)
    assert 1 < len(expected) < whole.B
    # the bound: B * MLP_FIT_TOKENS // N whole responses (about MLP_FIT_TOKENS tokens), at most that many
    # times the longest response
    keep = learned.mlp_keep(whole.B, int(whole.response_mask.sum()))
    assert len(sample.rows) == keep == whole.B * 900 // int(whole.response_mask.sum())
    assert int(sample.lengths.sum()) <= keep * int(whole.response_mask.sum(1).max())
    assert int(sample.count) == int(whole.response_mask.sum())  # the moments cover every token
