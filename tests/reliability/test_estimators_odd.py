"""Every registered estimator on odd data: zero-variance and singleton groups, length-0 and length-1
responses, all-masked rows, float16/bfloat16 inputs, a 100k-token row. Finite outputs that are 0 on
padding, or a clear error (never NaN, never an IndexError from deep inside)."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from backend.core.batch import BatchError, RolloutBatch, batch_from_records
from backend.estimators import registry
from tests.reliability.conftest import LONG, tally

pytestmark = pytest.mark.timeout(300)
CLEAR_ERRORS = (BatchError, ValueError)


def _rec(n: int, group: int, score: float, rid: int, rng: random.Random) -> dict:
    return {
        "token_ids": [rng.randrange(60) for _ in range(n)],
        "group_id": group,
        "rollout_id": rid,
        "scores": {"task": score, "format": 0.0},
        "token_rewards": {"style": [0.0] * n},
        "logprobs": [-rng.random() for _ in range(n)],
        "ref_logprobs": [-rng.random() for _ in range(n)],
        "entropies": [rng.random() * 2 for _ in range(n)],
        "values": [rng.random() for _ in range(n)],
        "tokens": [f"t{k}" if k % 5 else "." for k in range(n)],
    }


def _batch(spec: list[tuple[int, int, float]], seed: int = 0) -> RolloutBatch:
    rng = random.Random(seed)
    return batch_from_records([_rec(n, g, s, i, rng) for i, (n, g, s) in enumerate(spec)])


def _cast(batch: RolloutBatch, dtype: torch.dtype) -> RolloutBatch:
    def cast(x):
        return x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    return dataclasses.replace(
        batch,
        scores={k: cast(v) for k, v in batch.scores.items()},
        token_rewards={k: cast(v) for k, v in batch.token_rewards.items()},
        **{f: cast(getattr(batch, f)) for f in ("logprobs", "ref_logprobs", "entropies", "values")},
    )


CASES = {
    "zero-variance groups": _batch([(4, 0, 1.0), (3, 0, 1.0), (5, 1, 0.0), (2, 1, 0.0)]),
    "singleton groups": _batch([(4, 0, 1.0), (3, 1, 0.0), (5, 2, 1.0)]),
    "length-0 and length-1 responses": _batch([(0, 0, 1.0), (1, 0, 0.0), (1, 1, 1.0), (0, 1, 0.0)]),
    "all rows masked (every response empty)": _batch([(0, 0, 1.0), (0, 0, 0.0)]),
    "one group, one empty response": _batch([(0, 0, 1.0)]),
    "float16 inputs": _cast(_batch([(6, 0, 1.0), (4, 0, 0.0), (5, 1, 1.0), (3, 1, 0.0)]), torch.float16),
    "bfloat16 inputs": _cast(_batch([(6, 0, 1.0), (4, 0, 0.0), (5, 1, 1.0), (3, 1, 0.0)]), torch.bfloat16),
    "extreme scores": _batch([(3, 0, 1e30), (3, 0, -1e30), (2, 1, 1e-30), (2, 1, 0.0)]),
}
LONG_ROW = 100_000


def _needs_unmet(spec, batch: RolloutBatch) -> list[str]:
    return [n for n in spec.needs if getattr(batch, n, None) is None and n not in batch.extras]


def _check(name: str, batch: RolloutBatch, case: str) -> str:
    spec = registry.get(name)
    missing = _needs_unmet(spec, batch)
    try:
        result = registry.estimate(name, batch)
    except CLEAR_ERRORS as exc:
        message = str(exc)
        assert message and len(message.splitlines()) == 1, message
        if missing:
            assert any(m in message for m in missing), f"{name}: unmet need {missing} not named: {message}"
        tally(f"estimators: {case}", "clear error")
        return "clear error"
    assert not missing, f"{name} ran without {missing}"
    adv = result.advantages
    assert adv.shape == batch.response_mask.shape
    assert torch.isfinite(adv.float()).all()
    assert (adv[~batch.response_mask] == 0).all(), f"{name}: padding is not 0"
    tally(f"estimators: {case}", "finite output")
    return "finite"


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_estimator_on_odd_batches(case):
    failures = []
    for name in registry.names():
        try:
            _check(name, CASES[case], case)
        except Exception as exc:  # noqa: BLE001 - collect every estimator's failure, then report them all
            failures.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    assert not failures, f"{case}:\n" + "\n".join(failures)


def test_every_estimator_on_a_100k_token_row():
    batch = _batch([(LONG_ROW, 0, 1.0), (7, 0, 0.0), (LONG_ROW if LONG else 3, 1, 0.5), (2, 1, 0.0)], seed=1)
    failures = []
    for name in registry.names():
        try:
            _check(name, batch, "100k-token row")
        except Exception as exc:  # noqa: BLE001
            failures.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    assert not failures, "\n".join(failures)


def test_unmet_needs_fail_with_the_missing_field_named():
    batch = dataclasses.replace(CASES["singleton groups"], entropies=None, logprobs=None)
    for name in registry.names():
        spec = registry.get(name)
        if not _needs_unmet(spec, batch):
            continue
        with pytest.raises(CLEAR_ERRORS) as info:
            registry.estimate(name, batch)
        assert any(n in str(info.value) for n in _needs_unmet(spec, batch)), (name, str(info.value))
        tally("estimators: unmet needs", "clear error naming the field")
