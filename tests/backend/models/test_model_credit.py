"""OAR-P, OAR-G and GCPO scores on the bundled demo policy: batched == the loop twins, and the
`model-credit` cache: atomic, nothing on cancel or failure, estimators unavailable before and equal to the
cached scores after."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from backend.estimators import registry
from backend.estimators.methods.model_based import GCPOConfig, OARConfig, gcpo_weights, oar_weights
from backend.ingest import import_path
from backend.models import model_credit as mc
from backend.models.model_credit_run import ModelCreditSettings, run_model_credit
from backend.store import Store, StoreHandle
from backend.store.model_credit_queries import model_credit_rows, rollout_tokens
from tests.backend.models.conftest import DEMO_MODEL, DEMO_RUN
from tests.conftest import run_cli_here, snapshot, write_jsonl

POSITIONS = [0, 2, 5, 22]  # reasoning tokens of the first demo responses (digits, '+', a result digit)


@pytest.fixture(scope="module")
def rollouts():
    records = [json.loads(line) for line in DEMO_RUN.read_text().splitlines()[:3]]
    return [
        mc.RolloutTokens(i, r["prompt"], r["prompt_ids"], r["token_ids"], r["tokens"])
        for i, r in enumerate(records)
    ]


def test_answer_span_splits_reasoning_conclude_and_answer():
    tokens = list("1+2=3\n#### 3") + [""]
    assert mc.answer_span(tokens) == (6, 11, 12)  # '#### ' is the conclude text, '3' the answer
    assert mc.answer_span(list("1+2=3\n")) is None
    assert mc.answer_span(list("#### 3")) is None  # no reasoning before it
    assert mc.negative_prompt("84+48=?\n") == "84+48=?, but generate the wrong answer\n"


def test_oar_p_batched_equals_one_perturbation_at_a_time(engine, rollouts):
    batched = mc.oar_p_scores(engine, rollouts, chunk_size=7)
    for r in rollouts[:2]:
        loop = mc.oar_p_scores_loop(engine, r, positions=POSITIONS)
        np.testing.assert_allclose(batched[r.rollout_id][POSITIONS], loop[POSITIONS], atol=2e-5)
        reasoning_end = mc.answer_span(r.tokens)[0]
        assert np.isfinite(batched[r.rollout_id][:reasoning_end]).all()
        assert np.isnan(batched[r.rollout_id][reasoning_end:]).all()
    # padding out the digit the answer depends on moves the answer more than padding a space does
    first = batched[0]
    assert abs(first[3]) > 10 * abs(first[6])


def test_oar_g_batched_equals_one_token_at_a_time(engine, rollouts):
    batched = mc.oar_g_scores(engine, rollouts, chunk_size=2, noise_std=1e-3, seed=3)
    for r in rollouts[:2]:
        loop = mc.oar_g_scores_loop(engine, r, noise_std=1e-3, seed=3, positions=POSITIONS)
        np.testing.assert_allclose(batched[r.rollout_id][POSITIONS], loop[POSITIONS], rtol=1e-3, atol=1e-6)
    assert (batched[0][: mc.answer_span(rollouts[0].tokens)[0]] > 0).all()


def test_gcpo_batched_equals_one_token_at_a_time(engine, rollouts):
    batched = mc.gcpo_deltas(engine, rollouts, chunk_size=2)
    for r in rollouts[:2]:
        loop = mc.gcpo_deltas_loop(engine, r, positions=POSITIONS)
        np.testing.assert_allclose(batched[r.rollout_id][POSITIONS], loop[POSITIONS], atol=2e-5)
    assert np.abs(batched[0]).max() > 1.0  # the negative prompt changes the policy's predictions


def test_command_fills_the_cache_and_the_estimator_reads_it(demo_db, engine):
    handle = StoreHandle(demo_db)
    with handle.read() as store:
        group = store.load_batch("demo", group_ids=[0])
    assert "creditlens model-credit" in registry.unavailable(group)["gcpo"]
    done = run_cli_here(
        "estimate",
        "--db",
        str(demo_db),
        "--run",
        "demo",
        "--estimator",
        "gcpo",
        "--out",
        str(demo_db.parent / "a.parquet"),
    )
    assert done.returncode == 2 and "--method gcpo" in done.stderr

    done = run_cli_here(
        "model-credit",
        "--db",
        str(demo_db),
        "--run",
        "demo",
        "--method",
        "gcpo",
        "--rollout",
        "3",
        "--engine",
        "transformers",
        "--json",
    )
    assert done.returncode == 0
    report = json.loads(done.stdout)
    assert report["stored"] == 8 and report["rollouts"] == list(range(8))  # rollout 3's group

    with handle.read() as store:
        group = store.load_batch("demo", group_ids=[0])
        rows = model_credit_rows(store, "demo")
    assert "gcpo" not in registry.unavailable(group) and set(rows["method"]) == {"gcpo"}
    # The estimator equals GCPO's weights on scores computed directly, outside the store.
    with handle.read() as store:
        direct = mc.gcpo_deltas(engine, _inputs(rollout_tokens(store, "demo", list(range(8)))))
    delta = torch.zeros_like(group.extras["gcpo_scores"])
    for i, rid in enumerate(group.rollout_ids.tolist()):
        delta[i, : len(direct[rid])] = torch.from_numpy(direct[rid])
    weights, _ = gcpo_weights(delta, group.response_mask, GCPOConfig())
    z = registry.estimate("grpo", group).advantages[:, 0]
    fast = registry.estimate("gcpo", group).advantages
    torch.testing.assert_close(
        fast, torch.where(group.response_mask, z[:, None] * weights, 0.0), atol=1e-5, rtol=1e-4
    )
    # A group without scores stays unavailable: whole groups or nothing.
    with handle.read() as store:
        other = store.load_batch("demo", group_ids=[1])
    assert "gcpo" in registry.unavailable(other)


def _inputs(frame):
    return [
        mc.RolloutTokens(
            int(r.rollout_id),
            r.prompt,
            [int(t) for t in r.prompt_ids],
            [int(t) for t in r.token_ids],
            list(r.tokens),
        )
        for r in frame.itertuples()
    ]


def test_cancelled_or_failed_runs_leave_the_store_as_it_was(demo_db, engine, tmp_path):
    handle = StoreHandle(demo_db)
    settings = ModelCreditSettings(method="oar_p", model_dir=str(DEMO_MODEL), chunk_size=16)
    with handle.read() as store:
        before = snapshot(store)
    report = run_model_credit(handle, "demo", settings, rollout=0, engine=engine, cancel=lambda: True)
    assert report.cancelled and report.stored == 0
    with handle.read() as store:
        assert snapshot(store) == before

    done = run_model_credit(handle, "demo", settings, rollout=0, engine=engine)
    assert done.stored == 8 and not done.cancelled
    with handle.read() as store:
        cached = model_credit_rows(store, "demo")
        batch = store.load_batch("demo", group_ids=[0])
    after = registry.estimate("oar_p", batch, OARConfig())
    weights, _ = oar_weights(batch.extras["oar_p_scores"], batch.extras["oar_p_mask"] > 0, OARConfig())
    assert not torch.allclose(weights[batch.response_mask], torch.ones(1))  # the weights are not broadcast
    assert after.advantages.abs().sum() > 0

    # A run that fails half-way (a token id the model does not have) stores nothing either.
    records = [json.loads(line) for line in DEMO_RUN.read_text().splitlines()[:8]]
    records[5]["token_ids"] = records[5]["token_ids"][:-1] + [10_000]
    broken = write_jsonl(tmp_path / "broken.jsonl", records)
    with Store(demo_db) as store:
        import_path(store, broken, "broken")
    with handle.read() as store:
        before = snapshot(store)
    gcpo = ModelCreditSettings(method="gcpo", model_dir=str(DEMO_MODEL))
    with pytest.raises(IndexError):
        run_model_credit(handle, "broken", gcpo, rollouts=8, engine=engine)
    with handle.read() as store:
        assert snapshot(store) == before
        again = model_credit_rows(store, "demo")
    for a, b in zip(again["scores"], cached["scores"], strict=True):  # the earlier cache is untouched
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
