"""Suffix resampling on the demo policy, through the library and the real command line + DuckDB file."""

import json
import math
import threading

import numpy as np
import pytest

from backend.core.errors import InputError
from backend.ingest import import_path
from backend.models.resample import (
    mc_teacher,
    parse_suggestion,
    resample,
    segment_advantages,
    suggest_entropy,
    suggest_steps,
    suggested_positions,
)
from backend.store import Store
from tests.backend.models.conftest import DEMO_MODEL, DEMO_RUN
from tests.conftest import run_cli_here

RESPONSE = "7+5=12 carry 1\n4+8+1=13 carry 1\n#### 132"


def test_values_are_means_with_standard_errors(engine):
    prompt, tokens = engine.encode("47+85=?\n"), engine.encode(RESPONSE)
    result = resample(engine, prompt, tokens, [0, 15, len(tokens)], samples=6, ground_truth=132, seed=1)
    assert [p.pos for p in result.positions] == [0, 15, len(tokens)]
    for p in result.positions:
        rewards = np.array([s.reward for s in result.samples if s.pos == p.pos])
        assert p.n == 6 and p.value == pytest.approx(rewards.mean())
        assert p.stderr == pytest.approx(rewards.std(ddof=1) / math.sqrt(6))
    assert result.tokens == sum(len(s.suffix_ids) for s in result.samples) > 0
    # Keeping "#### 132" but the last digit: almost every suffix completes the right answer.
    assert (
        resample(engine, prompt, tokens, [len(tokens) - 1], samples=4, ground_truth=132).positions[0].value
        >= 0.5
    )
    again = resample(engine, prompt, tokens, [0, 15, len(tokens)], samples=6, ground_truth=132, seed=1)
    assert [s.suffix_ids for s in again.samples] == [s.suffix_ids for s in result.samples]
    assert list(result.table().columns) == [
        "pos",
        "sample_idx",
        "seed",
        "suffix_ids",
        "suffix_text",
        "reward",
        "engine",
        "model",
    ]


def test_cancel_keeps_finished_chunks(engine, monkeypatch):
    monkeypatch.setattr(engine, "max_batch", 4)
    prompt, tokens = engine.encode("47+85=?\n"), engine.encode(RESPONSE)
    stop, seen = threading.Event(), []

    def progress(done, total):
        seen.append((done, total))
        stop.set()  # cancel after the first chunk

    result = resample(
        engine, prompt, tokens, [0, 10, 20], samples=4, ground_truth=132, progress=progress, cancel=stop
    )
    assert seen == [(4, 12)] and result.cancelled
    assert len(result.samples) == 4 and [p.n for p in result.positions] == [4]


def test_position_suggestions():
    tokens = list("ab\ncd\n#### 4")
    assert suggest_steps(tokens) == [0, 3, 6]
    # the simple tokenization puts the newline before the next line's first word: the state before it
    simple = ["4", "+", "8", "=", "12", " carry", " 1", "\n8", "+", "4", "=", "12", "\n", "####", " 12"]
    assert suggest_steps(simple) == [0, 7, 13]
    assert suggest_steps(simple, include_start=False) == [7, 13]
    assert suggest_steps(["a", ".\n\n", "b", "\n"]) == [0, 2]  # a final newline starts no new state
    assert suggest_entropy([0.1, 2.0, 0.5, 3.0, float("nan")], k=2) == [1, 3]
    assert parse_suggestion("entropy:1", tokens, [0.0] * 11 + [5.0]) == [11]
    with pytest.raises(InputError, match="needs entropies"):
        parse_suggestion("entropy:3", tokens, None)
    with pytest.raises(InputError, match="choose entropy:K or steps"):
        parse_suggestion("random", tokens, None)
    with pytest.raises(InputError, match="outside the response"):
        resample(None, [1], [5, 6], [3])


def test_segment_advantages_follow_the_estimator_definition():
    adv = segment_advantages({0: 0.5, 3: 0.75}, length=5, outcome=1.0)
    np.testing.assert_allclose(adv, [0.25, 0.25, 0.25, 0.25, 0.25])
    adv = segment_advantages({2: 0.5, 4: 0.0}, length=6, outcome=1.0)
    np.testing.assert_allclose(adv, [0, 0, -0.5, -0.5, 1.0, 1.0])


def test_mc_teacher_values_every_step_end(engine):
    prompt, tokens = engine.encode("47+85=?\n"), engine.encode(RESPONSE)
    teacher = mc_teacher(
        engine, prompt, tokens, engine.token_texts(tokens), outcome=1.0, samples=3, ground_truth=132
    )
    assert sorted(teacher.values) == [0, 15, 32]
    assert teacher.advantages.shape == (len(tokens),)


@pytest.mark.slow
def test_resample_and_score_commands_on_a_real_store(tmp_path):
    db = tmp_path / "runs.duckdb"
    bare = tmp_path / "bare.jsonl"
    records = [json.loads(line) for line in DEMO_RUN.read_text().splitlines()[-16:]]
    with bare.open("w") as fh:
        for r in records:
            for key in ("logprobs", "entropies"):
                r.pop(key)
            fh.write(json.dumps(r) + "\n")
    with Store(db) as store:
        import_path(store, DEMO_RUN, "demo", model_dir=str(DEMO_MODEL), verifier="answer_match")
        import_path(store, bare, "bare", model_dir=str(DEMO_MODEL), verifier="answer_match")
        rollout = store.rollout("demo", 440)
    assert rollout["prompt"] == records[8]["prompt"]

    done = run_cli_here(
        "resample",
        "--db",
        str(db),
        "--run",
        "demo",
        "--rollout",
        "440",
        "--suggest",
        "steps",
        "--samples",
        "4",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(report) >= {"positions", "tokens", "seconds"}
    steps = suggested_positions("steps", rollout["tokens"], None)  # the Resample view's suggestion
    assert steps and 0 not in steps
    assert [p["pos"] for p in report["positions"]] == steps
    assert all(p["n"] == 4 and 0 <= p["value"] <= 1 for p in report["positions"])

    assert run_cli_here("score", "--db", str(db), "--run", "bare").returncode == 0
    done = run_cli_here(
        "resample", "--db", str(db), "--run", "demo", "--rollout", "440", "--positions", "2,900"
    )
    assert done.returncode == 2
    err = done.stderr
    assert err.count("\n") == 1 and "outside the response" in err

    with Store(db, read_only=True) as store:
        values = store.resample_values("demo", 440)
        stored = store.resample_samples("demo", 440)
        scored = store.load_batch("bare")
        original = store.load_batch("demo", rollout_ids=list(range(432, 448)))
    assert values["pos"].tolist() == steps and (values["n"] == 4).all()
    assert len(stored) == 4 * len(steps) and stored["seed"].is_unique
    assert np.allclose(values["value"], [p["value"] for p in report["positions"]])
    # The bare rollouts were sampled from this very checkpoint (step 3), so rescoring gives back the logprobs.
    assert scored.logprobs is not None and scored.entropies is not None
    mask = scored.response_mask
    np.testing.assert_allclose(scored.logprobs[mask], original.logprobs[mask], atol=1e-3)
